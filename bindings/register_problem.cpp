// Bindings for plan replay and the frontier solver (cpp/evaluate.hpp,
// cpp/frontier.hpp). A Problem ties a pipeline to a profile's options.
#include "pybind11.hpp"

#include <cmath>
#include <memory>
#include <mutex>

#include "dag.hpp"
#include "evaluate.hpp"
#include "frontier.hpp"
#include "options.hpp"
#include "pipeline.hpp"

using namespace perseus;

namespace {

class Problem {
 public:
  Problem(const Pipeline& pipeline, std::vector<Index> offsets, std::vector<double> time_s,
          std::vector<double> energy_j, double blocking_power_w)
      : pipeline_(pipeline),
        dag_(pipeline_),
        table_(pipeline_.num_stages(), std::move(offsets), std::move(time_s), std::move(energy_j)),
        blocking_power_w_(blocking_power_w),
        evaluator_(pipeline_, dag_, table_, blocking_power_w) {
    if (!(blocking_power_w >= 0) || !std::isfinite(blocking_power_w))
      throw std::invalid_argument("blocking_power must be a finite number of watts >= 0");
  }
  Problem(const Problem&) = delete;
  Problem& operator=(const Problem&) = delete;

  const Pipeline& pipeline() const { return pipeline_; }

  // The DAG's edges as (predecessor ids, successor ids).
  py::tuple edges() const {
    std::vector<Index> from, to;
    from.reserve(static_cast<std::size_t>(dag_.num_edges()));
    to.reserve(static_cast<std::size_t>(dag_.num_edges()));
    for (Index u = 0; u < dag_.num_nodes(); ++u)
      for (const Index* v = dag_.successors_begin(u); v != dag_.successors_end(u); ++v) {
        from.push_back(u);
        to.push_back(*v);
      }
    return py::make_tuple(to_numpy(std::move(from)), to_numpy(std::move(to)));
  }

  // Rows of `choices` are plans; returns (iteration times, energies).
  py::tuple evaluate(py::array_t<OptionIndex, py::array::c_style | py::array::forcecast> choices,
                     bool reclaim, double deadline_s) {
    const Index n = pipeline_.size();
    if (choices.ndim() != 2 || choices.shape(1) != n)
      throw std::invalid_argument("choices must have shape (plans, " + std::to_string(n) + ")");
    check_choices(choices);
    py::array_t<OptionIndex> out(std::vector<py::ssize_t>{choices.shape(0), n});
    std::copy(choices.data(), choices.data() + choices.size(), out.mutable_data());
    std::vector<double> times(static_cast<std::size_t>(choices.shape(0)));
    std::vector<double> energies(times.size());
    {
      py::gil_scoped_release release;
      const std::lock_guard<std::mutex> lock(mutex_);  // the evaluator's scratch is shared
      for (std::size_t k = 0; k < times.size(); ++k) {
        OptionIndex* row = out.mutable_data() + k * static_cast<std::size_t>(n);
        const Evaluation e = reclaim ? evaluator_.reclaim_both(row, deadline_s) : evaluator_.evaluate(row);
        times[k] = e.iteration_time_s;
        energies[k] = e.energy_j;
      }
    }
    return py::make_tuple(to_numpy(std::move(times)), to_numpy(std::move(energies)), out);
  }

  py::dict solve(double unit_time_s, const py::object& progress, bool refine) {
    SolverOptions options;
    options.unit_time_s = unit_time_s;
    options.refine = refine;
    options.blocking_power_w = blocking_power_w_;
    // Runs with the GIL released; the hook takes it back to check for Ctrl-C
    // and to call the user's progress function.
    std::unique_ptr<py::error_already_set> pending;
    options.progress = [&](std::int64_t done, std::int64_t expected) {
      py::gil_scoped_acquire acquire;
      try {
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
        if (!progress.is_none()) progress(done, expected);
      } catch (py::error_already_set& e) {
        pending = std::make_unique<py::error_already_set>(std::move(e));
        return false;
      }
      return true;
    };
    FrontierResult r;
    try {
      py::gil_scoped_release release;
      r = solve_frontier(pipeline_, dag_, table_, options);
    } catch (const SolveCancelled&) {
      if (pending) throw std::move(*pending);
      throw;
    }
    const auto plans = static_cast<py::ssize_t>(r.num_plans());
    py::dict out;
    out["choices"] = to_numpy(std::move(r.choices), {plans, static_cast<py::ssize_t>(r.num_computations)});
    out["iteration_time_s"] = to_numpy(std::move(r.iteration_time_s));
    out["energy_j"] = to_numpy(std::move(r.energy_j));
    out["energy_before_reclaim_j"] = to_numpy(std::move(r.energy_before_reclaim_j));
    out["baseline_time_s"] = r.baseline.iteration_time_s;
    out["baseline_energy_j"] = r.baseline.energy_j;
    out["steps"] = r.steps;
    out["unit_time_s"] = r.unit_time_s;
    out["min_time_units"] = r.min_time_units;
    out["max_time_units"] = r.max_time_units;
    return out;
  }

 private:
  void check_choices(const py::array_t<OptionIndex, py::array::c_style | py::array::forcecast>& choices) {
    const Index n = pipeline_.size();
    const OptionIndex* data = choices.data();
    for (py::ssize_t k = 0; k < choices.shape(0); ++k)
      for (Index i = 0; i < n; ++i) {
        const Index g = evaluator_.group(i);
        if (data[k * n + i] >= table_.num_options(g))
          throw std::invalid_argument("plan " + std::to_string(k) + ": computation " +
                                      std::to_string(i) + " chooses option " +
                                      std::to_string(data[k * n + i]) + " of " +
                                      std::to_string(table_.num_options(g)));
      }
  }

  Pipeline pipeline_;
  Dag dag_;
  OptionTable table_;
  double blocking_power_w_;
  Evaluator evaluator_;
  std::mutex mutex_;
};

}  // namespace

void register_problem(py::module_& m) {
  py::register_exception<SolveCancelled>(m, "SolveCancelled", PyExc_KeyboardInterrupt);
  py::class_<Problem>(m, "Problem", "A pipeline together with a profile's measured options.")
      .def(py::init<const Pipeline&, std::vector<Index>, std::vector<double>, std::vector<double>,
                    double>(),
           "pipeline"_a, "offsets"_a, "time_s"_a, "energy_j"_a, "blocking_power_w"_a)
      .def_property_readonly("pipeline", &Problem::pipeline, py::return_value_policy::reference_internal)
      .def("edges", &Problem::edges, "The iteration DAG's edges: (from ids, to ids).")
      .def("evaluate", &Problem::evaluate, "choices"_a, "reclaim"_a = false, "deadline_s"_a = 0.0,
           "Replay plans (rows of option indices); with reclaim, first move computations to "
           "slower options within max(deadline_s, own time). Returns (times s, energies J, "
           "choices).")
      .def("solve", &Problem::solve, "unit_time_s"_a, "progress"_a = py::none(), "refine"_a = true,
           "Compute the frontier; returns a dict of numpy arrays.");
}
