// Bindings for the option filter, plan replay and the frontier solver
// (cpp/options.hpp, cpp/problem.hpp, cpp/frontier.hpp, cpp/solver_options.hpp).
#include "pybind11.hpp"

#include <cstdint>
#include <iterator>
#include <memory>
#include <vector>

#include "choice_values.hpp"
#include "frontier.hpp"
#include "locked_problem.hpp"
#include "options.hpp"
#include "pacer.hpp"
#include "plan_improver.hpp"
#include "solver_options.hpp"

using namespace perseus;

namespace {

template <typename T>
using CArray = py::array_t<T, py::array::c_style | py::array::forcecast>;

py::tuple split(const std::vector<Evaluation>& evaluations) {
  std::vector<double> times, energies;
  for (const Evaluation& e : evaluations) {
    times.push_back(e.iteration_time_s);
    energies.push_back(e.energy_j);
  }
  return py::make_tuple(to_numpy(std::move(times)), to_numpy(std::move(energies)));
}

std::size_t rows_of(const py::buffer_info& info, Index n, const char* name) {
  if (info.ndim != 2 || info.shape[1] != n)
    throw std::invalid_argument(std::string(name) + " must have shape (plans, " + std::to_string(n) +
                                ")");
  return static_cast<std::size_t>(info.shape[0]);
}

py::tuple evaluate(LockedProblem& self, const CArray<OptionIndex>& choices) {
  const std::size_t plans = rows_of(choices.request(), self.pipeline().size(), "choices");
  std::vector<Evaluation> out;
  {
    py::gil_scoped_release release;
    out = self.evaluate(choices.data(), plans);
  }
  return split(out);
}

// (times, energies, the improved plans) of an improvement run without the GIL.
template <typename Improve>
py::tuple improved(LockedProblem& self, const CArray<OptionIndex>& choices, Improve improve) {
  const Index n = self.pipeline().size();
  const std::size_t plans = rows_of(choices.request(), n, "choices");
  ImprovedPlans out;
  {
    py::gil_scoped_release release;
    out = improve(choices.data(), plans);
  }
  py::tuple columns = split(out.evaluations);
  return py::make_tuple(
      columns[0], columns[1],
      to_numpy(std::move(out.choices), {static_cast<py::ssize_t>(plans), static_cast<py::ssize_t>(n)}));
}

py::tuple reclaim(LockedProblem& self, const CArray<OptionIndex>& choices, double deadline_s,
                  ReclaimOrder order) {
  return improved(self, choices, [&](const OptionIndex* rows, std::size_t plans) {
    return self.reclaim(rows, plans, deadline_s, order);
  });
}

py::tuple local_search(LockedProblem& self, const CArray<OptionIndex>& choices, double deadline_s,
                       std::int64_t max_work) {
  return improved(self, choices, [&](const OptionIndex* rows, std::size_t plans) {
    return self.local_search(rows, plans, deadline_s, max_work);
  });
}

py::tuple tighten(LockedProblem& self, const CArray<OptionIndex>& choices, double deadline_s) {
  return improved(self, choices, [&](const OptionIndex* rows, std::size_t plans) {
    return self.tighten(rows, plans, deadline_s);
  });
}

// An interrupt hook for work run with the GIL released: it takes the GIL
// back, runs any pending signal handler (Ctrl-C's raises KeyboardInterrupt)
// and, when one raised, keeps that error in `pending` for the caller to
// re-raise once the work has stopped.
InterruptHook signal_hook(std::unique_ptr<py::error_already_set>& pending) {
  return [&pending]() {
    py::gil_scoped_acquire acquire;
    if (PyErr_CheckSignals() == 0) return false;
    pending = std::make_unique<py::error_already_set>();
    return true;
  };
}

// (time s, energy J, plan) of one plan solved for deadline_s from `starts`,
// or None when not even the all-fastest plan meets it.
py::object search_deadline(LockedProblem& self, const CArray<OptionIndex>& starts,
                           const CArray<double>& time_s, double deadline_s, std::int64_t max_work) {
  const Index n = self.pipeline().size();
  const std::size_t plans = rows_of(starts.request(), n, "starts");
  const py::buffer_info times = time_s.request();
  if (times.ndim != 1 || static_cast<std::size_t>(times.shape[0]) != plans)
    throw std::invalid_argument("time_s must hold one time per start");
  // Ctrl-C (any pending signal handler) stops the search, as it stops a
  // solve: the hook takes the GIL back when the pacer's poll period is up.
  SolverOptions options;
  std::unique_ptr<py::error_already_set> pending;
  options.interrupted = signal_hook(pending);
  Pacer pacer(options);
  ImprovedPlans out;
  try {
    py::gil_scoped_release release;
    out = self.search_deadline(starts.data(), plans, time_s.data(), deadline_s, max_work,
                               [&pacer] { pacer.tick(Phase::kLocalSearch, 0, 1); });
  } catch (const SolveCancelled&) {
    if (pending) throw std::move(*pending);
    throw;
  }
  if (out.evaluations.empty()) return py::none();
  return py::make_tuple(out.evaluations[0].iteration_time_s, out.evaluations[0].energy_j,
                        to_numpy(std::move(out.choices)));
}

py::tuple replay(LockedProblem& self, const CArray<double>& time_s, const CArray<double>& energy_j) {
  const Index n = self.pipeline().size();
  const std::size_t plans = rows_of(time_s.request(), n, "time_s");
  if (rows_of(energy_j.request(), n, "energy_j") != plans)
    throw std::invalid_argument("time_s and energy_j must have the same shape");
  std::vector<Evaluation> out;
  {
    py::gil_scoped_release release;
    out = self.replay(time_s.data(), energy_j.data(), plans);
  }
  return split(out);
}

// Runs the solve with the GIL released. The hooks take it back: one checks
// for Ctrl-C (and any other pending signal handler), the other calls the
// user's progress function; an exception from either ends the solve and is
// re-raised here with its traceback.
FrontierResult solve(const LockedProblem& self, double unit_time_s, bool refine,
                     const SolverBudgets& budgets, const py::object& progress, double progress_period_s,
                     int threads) {
  SolverOptions options;
  options.threads = threads;
  options.unit_time_s = unit_time_s;
  options.refine = refine;
  options.budgets = budgets;
  options.progress_period_s = progress_period_s;
  std::unique_ptr<py::error_already_set> pending;
  options.interrupted = signal_hook(pending);
  if (!progress.is_none()) {
    options.progress = [&](Phase phase, std::int64_t done, std::int64_t total, double fraction) {
      py::gil_scoped_acquire acquire;
      try {
        const py::object answer = progress(phase, done, total, fraction);
        return answer.is_none() || answer.cast<bool>();
      } catch (py::error_already_set& e) {
        pending = std::make_unique<py::error_already_set>(std::move(e));
        return false;
      }
    };
  }
  try {
    py::gil_scoped_release release;
    return self.solve(options);
  } catch (const SolveCancelled&) {
    if (pending) throw std::move(*pending);
    throw;
  }
}

template <typename T>
py::array_t<T> copy_of(const std::vector<T>& values) {
  return to_numpy(std::vector<T>(values));
}

// The arguments both gathers take, checked: first_option as a vector (copied
// while the GIL is held); the core checks their sizes.
std::vector<std::int32_t> checked_first_option(const FrontierResult& r,
                                               const CArray<std::int32_t>& first_option,
                                               const CArray<std::int32_t>& values) {
  if (first_option.ndim() != 1)
    throw std::invalid_argument("first_option must have one entry per computation (" +
                                std::to_string(r.num_computations) + ")");
  if (values.ndim() != 1) throw std::invalid_argument("values must be 1-D");
  return std::vector<std::int32_t>(first_option.data(), first_option.data() + first_option.size());
}

// Converts and releases the GIL; the gather is choice_values.hpp's.
py::array_t<std::int32_t> gather_choice_values(const FrontierResult& r,
                                               const CArray<std::int32_t>& first_option,
                                               const CArray<std::int32_t>& values) {
  const std::vector<std::int32_t> first = checked_first_option(r, first_option, values);
  std::vector<std::int32_t> out;
  {
    py::gil_scoped_release release;
    out = choice_values(r, first, values.data(), static_cast<std::size_t>(values.size()));
  }
  return to_numpy(std::move(out), {r.num_plans(), r.num_computations});
}

// (first row, change counts, changed ids, their values): choice_values.hpp's
// choice_value_changes, converted.
py::tuple gather_choice_value_changes(const FrontierResult& r, const CArray<std::int32_t>& first_option,
                                      const CArray<std::int32_t>& values) {
  const std::vector<std::int32_t> first = checked_first_option(r, first_option, values);
  ValueChanges out;
  {
    py::gil_scoped_release release;
    out = choice_value_changes(r, first, values.data(), static_cast<std::size_t>(values.size()));
  }
  return py::make_tuple(to_numpy(std::move(out.first)), to_numpy(std::move(out.counts)),
                        to_numpy(std::move(out.ids)), to_numpy(std::move(out.values)));
}

}  // namespace

void register_problem(py::module_& m) {
  py::register_exception<SolveCancelled>(m, "SolveCancelled", PyExc_KeyboardInterrupt);

  py::enum_<Phase>(m, "Phase", "Phases of a frontier solve, in the order they run.")
      .value("MIN_CUT", Phase::kMinCut)
      .value("CANDIDATES", Phase::kCandidates)
      .value("RECLAIM", Phase::kReclaim)
      .value("LOCAL_SEARCH", Phase::kLocalSearch);
  m.def("phase_name", &phase_name, "phase"_a, "Human-readable name of a phase.");
  py::enum_<ReclaimOrder>(m, "ReclaimOrder", "Greedy order of slack reclamation.")
      .value("SAVING_PER_SECOND", ReclaimOrder::kSavingPerSecond)
      .value("SAVING", ReclaimOrder::kSaving);
  py::enum_<StopReason>(m, "StopReason", "Why the min-cut loop stopped.")
      .value("MINIMUM_TIME", StopReason::kMinimumTime)
      .value("NO_PROGRESS", StopReason::kNoProgress)
      .value("INFEASIBLE_FLOW", StopReason::kInfeasibleFlow);
  m.def("stop_reason_name", &stop_reason_name, "reason"_a);

  py::class_<SolverBudgets>(m, "SolverBudgets", "Work budgets of a solve (cpp/solver_options.hpp).")
      .def(py::init<>())
      .def_readwrite("multi_unit_steps", &SolverBudgets::multi_unit_steps)
      .def_readwrite("units_per_option_gap", &SolverBudgets::units_per_option_gap)
      .def_readwrite("max_unit_divisor", &SolverBudgets::max_unit_divisor)
      .def_readwrite("max_solver_units", &SolverBudgets::max_solver_units)
      .def_readwrite("candidate_energy_resolution", &SolverBudgets::candidate_energy_resolution)
      .def_readwrite("candidate_max_spacing_units", &SolverBudgets::candidate_max_spacing_units)
      .def_readwrite("tight_chain_coarsening", &SolverBudgets::tight_chain_coarsening)
      .def_readwrite("local_search_work_per_element", &SolverBudgets::local_search_work_per_element)
      .def_readwrite("local_search_work_floor", &SolverBudgets::local_search_work_floor)
      .def_readwrite("local_search_floor_computations", &SolverBudgets::local_search_floor_computations)
      .def_readwrite("local_search_floor_exponent", &SolverBudgets::local_search_floor_exponent)
      .def_readwrite("local_search_floor_exponent_below",
                     &SolverBudgets::local_search_floor_exponent_below)
      .def_readwrite("local_search_coarse_options", &SolverBudgets::local_search_coarse_options)
      .def_readwrite("local_search_work_cap", &SolverBudgets::local_search_work_cap)
      .def_readwrite("local_search_max_grid", &SolverBudgets::local_search_max_grid)
      .def_readwrite("local_search_rounds", &SolverBudgets::local_search_rounds)
      .def_readwrite("hull_search_share", &SolverBudgets::hull_search_share)
      .def_readwrite("hull_search_deadlines", &SolverBudgets::hull_search_deadlines)
      .def_readwrite("hull_search_work_per_computation",
                     &SolverBudgets::hull_search_work_per_computation)
      .def_readwrite("exhaustive_max_work", &SolverBudgets::exhaustive_max_work)
      .def_readwrite("plan_energy_resolution", &SolverBudgets::plan_energy_resolution);

  // The local search's fixed move set, read-only: visible so a user can see what a solve
  // tries, not settable, because changing it changes the algorithm (solver_options.hpp).
  namespace moves = local_search_moves;
  py::dict move_table;
  move_table["squeezes"] = py::tuple(
      py::cast(std::vector<double>(std::begin(moves::kSqueezes), std::end(moves::kSqueezes))));
  move_table["jumps_options"] = py::tuple(
      py::cast(std::vector<std::int32_t>(std::begin(moves::kJumps), std::end(moves::kJumps))));
  move_table["pair_candidates"] = moves::kPairCandidates;
  move_table["starts_per_side"] = moves::kStartsPerSide;
  move_table["improvement_share"] = moves::kImprovementShare;
  move_table["critical_share"] = moves::kCriticalShare;
  move_table["hull_gap_share"] = moves::kHullGapShare;
  move_table["kick_computations"] = moves::kKickComputations;
  move_table["kicks"] = moves::kKicks;
  move_table["kicks_without_gain"] = moves::kKicksWithoutGain;
  move_table["kick_min_moves"] = moves::kKickMinMoves;
  move_table["kick_max_moves"] = moves::kKickMaxMoves;
  move_table["kick_restart_every"] = moves::kKickRestartEvery;
  m.attr("LOCAL_SEARCH_MOVES") = move_table;
  m.attr("DEFAULT_THREADS") = SolverOptions::kDefaultThreads;
  m.attr("MAX_THREADS") = SolverOptions::kMaxThreads;

  py::class_<FrontierResult>(m, "SolveResult", "What a solve returns (cpp/frontier.hpp).")
      .def_property_readonly("choices",
                             [](const FrontierResult& r) {
                               return to_numpy(r.choices.dense(), {r.num_plans(), r.num_computations});
                             })
      .def_property_readonly("retained_plan_bytes",
                             [](const FrontierResult& r) { return r.choices.retained_bytes(); })
      .def_property_readonly("iteration_time_s",
                             [](const FrontierResult& r) { return copy_of(r.iteration_time_s); })
      .def_property_readonly("energy_j", [](const FrontierResult& r) { return copy_of(r.energy_j); })
      .def_property_readonly("energy_before_reclaim_j",
                             [](const FrontierResult& r) { return copy_of(r.energy_before_reclaim_j); })
      .def_property_readonly("baseline_time_s",
                             [](const FrontierResult& r) { return r.baseline.iteration_time_s; })
      .def_property_readonly("baseline_energy_j",
                             [](const FrontierResult& r) { return r.baseline.energy_j; })
      .def("choice_values", &gather_choice_values, "first_option"_a, "values"_a,
           "values[first_option[i] + choice] per plan and computation i, as int32 (plans, n).")
      .def("choice_value_changes", &gather_choice_value_changes, "first_option"_a, "values"_a,
           "choice_values as (plan 0's row, per plan the count of values that change, which "
           "computations, their new values).")
      .def_readonly("steps", &FrontierResult::steps)
      .def_readonly("cuts", &FrontierResult::cuts)
      .def_readonly("unit_time_s", &FrontierResult::unit_time_s)
      .def_readonly("min_time_units", &FrontierResult::min_time_units)
      .def_readonly("max_time_units", &FrontierResult::max_time_units)
      .def_readonly("stop_reason", &FrontierResult::stop_reason)
      .def_readonly("candidates", &FrontierResult::candidates)
      .def_property_readonly("phase_seconds", [](const FrontierResult& r) {
        py::dict out;
        for (int p = 0; p < 4; ++p) out[phase_name(static_cast<Phase>(p))] = r.phase_seconds[ix(p)];
        return out;
      });

  m.def(
      "useful_options",
      [](const CArray<double>& time_s, const CArray<double>& energy_j, double blocking_power_w) {
        if (time_s.ndim() != 1 || energy_j.ndim() != 1 || time_s.size() != energy_j.size())
          throw std::invalid_argument("time_s and energy_j must be 1-D and of the same length");
        return to_numpy(useful_options(time_s.data(), energy_j.data(),
                                       static_cast<Index>(time_s.size()), blocking_power_w));
      },
      "time_s"_a, "energy_j"_a, "blocking_power_w"_a,
      "Positions of the options worth keeping, fastest first (time strictly increasing, "
      "energy - blocking_power_w * time strictly decreasing).");

  py::class_<LockedProblem>(m, "Problem", "A pipeline together with a profile's useful options.")
      .def(py::init<const Pipeline&, std::vector<Index>, std::vector<double>, std::vector<double>,
                    double>(),
           "pipeline"_a, "offsets"_a, "time_s"_a, "energy_j"_a, "blocking_power_w"_a)
      .def_property_readonly(
          "pipeline", [](const LockedProblem& p) -> const Pipeline& { return p.pipeline(); },
          py::return_value_policy::reference_internal)
      .def(
          "edges",
          [](const LockedProblem& p) {
            const Dag& dag = p.problem().dag();
            std::vector<Index> from, to;
            for (ComputationId u(0); u.value() < dag.num_nodes(); ++u)
              for (const ComputationId* v = dag.successors_begin(u); v != dag.successors_end(u); ++v) {
                from.push_back(u.value());
                to.push_back(v->value());
              }
            return py::make_tuple(to_numpy(std::move(from)), to_numpy(std::move(to)));
          },
          "The iteration DAG's edges: (from ids, to ids).")
      .def("evaluate", &evaluate, "choices"_a,
           "Replay plans (rows of option indices). Returns (times s, energies J).")
      .def("reclaim", &reclaim, "choices"_a, "deadline_s"_a = 0.0,
           "order"_a = ReclaimOrder::kSavingPerSecond,
           "Move computations to slower options within max(deadline_s, each plan's time). "
           "Returns (times s, energies J, the reclaimed plans).")
      .def("local_search", &local_search, "choices"_a, "deadline_s"_a, "max_work"_a,
           "Local search on each plan at a deadline (exchanges, pushes, squeezes; "
           "cpp/plan_improver.hpp). Returns (times s, energies J, the plans).")
      .def("tighten", &tighten, "choices"_a, "deadline_s"_a,
           "Speed each plan up until it meets deadline_s (cheapest useful speed-ups first), then "
           "slow it into what is left of the deadline. A plan that cannot meet it comes back as "
           "fast as that got it. Returns (times s, energies J, the plans).")
      .def("search_deadline", &search_deadline, "starts"_a, "time_s"_a, "deadline_s"_a, "max_work"_a,
           "One plan solved for deadline_s from starts near it (frontier plans with their times, "
           "fastest first; refinement.hpp's search_deadline). Returns (time s, energy J, the plan) "
           "or None when not even the all-fastest plan meets the deadline.")
      .def("replay", &replay, "time_s"_a, "energy_j"_a,
           "Replay plans given as rows of measured times and energies. Returns (times s, energies J).")
      .def("solve", &solve, "unit_time_s"_a, "refine"_a, "budgets"_a, "progress"_a = py::none(),
           "progress_period_s"_a = 0.1, "threads"_a = 0,
           "Compute the frontier (threads: 0 picks the default, 4).");
}
