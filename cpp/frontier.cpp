#include "frontier.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "exhaustive.hpp"
#include "phillips_dessouky.hpp"
#include "plan_improver.hpp"
#include "plan_log.hpp"
#include "refinement.hpp"

namespace perseus {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The median of `values` (the upper one of an even count; reorders them).
// Precondition: not empty.
double median_of(std::vector<double>& values) {
  const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

// The min-cut loop's quantum when refining: the user's unit divided by an
// integer (SolverBudgets::units_per_option_gap and its bounds).
std::int64_t unit_divisor(const Pipeline& pipeline, const Dag& dag, const OptionTable& table,
                          const SolverOptions& options) {
  if (!options.refine) return 1;
  std::vector<double> gaps;
  for (GroupId g(0); g.value() < table.num_groups(); ++g)
    for (Index k = 1; k < table.num_options(g); ++k)
      gaps.push_back(table.time_s(g, k) - table.time_s(g, k - 1));
  if (gaps.empty()) return 1;
  const double median_gap = median_of(gaps);
  const SolverBudgets& b = options.budgets;
  double divisor = std::ceil(b.units_per_option_gap * options.unit_time_s / median_gap);
  divisor = std::clamp(divisor, 1.0, std::max(1.0, b.max_unit_divisor));
  // The loop spans the iteration time from every option slowest to every fastest.
  Evaluator evaluator(pipeline, dag, table);
  std::vector<OptionIndex> choice(ix(pipeline.size()), 0);
  const double fastest = evaluator.evaluate(choice.data()).iteration_time_s;
  for (Index i = 0; i < pipeline.size(); ++i)
    choice[ix(i)] = static_cast<OptionIndex>(table.num_options(evaluator.group(i)) - 1);
  const double span_units =
      (evaluator.evaluate(choice.data()).iteration_time_s - fastest) / options.unit_time_s;
  if (span_units * divisor > b.max_solver_units)
    divisor = std::floor(b.max_solver_units / std::max(span_units, 1.0));
  return static_cast<std::int64_t>(std::max(1.0, divisor));
}

// Runs a job on a thread of its own, or (threaded = false: no thread to
// spare) on the caller's thread inside finish(). Only the calling thread may
// call the user's hooks (Python handles signals on its main thread), so a
// threaded job polls a flag and posts how far it is, and the caller reports
// that while it waits. The destructor stops and joins the worker, however
// the caller leaves; `release` (if given) runs first and wakes a job that
// may be waiting for something the caller will no longer produce.
class Worker {
 public:
  template <typename Job>
  Worker(bool threaded, Job job, std::function<void()> release = {}) : release_(std::move(release)) {
    if (!threaded) {
      deferred_ = job;
      return;
    }
    result_ = std::async(std::launch::async, [this, job]() {
      job([this](std::int64_t done, std::int64_t total) {
        done_.store(done, std::memory_order_relaxed);
        total_.store(total, std::memory_order_relaxed);
        if (stop_.load(std::memory_order_relaxed)) throw SolveCancelled();
      });
      finished_.store(true, std::memory_order_relaxed);
    });
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ~Worker() {
    stop_ = true;
    if (release_) release_();
    if (result_.valid()) result_.wait();
  }
  // Waits for the job, calling poll(done, total) with its last progress
  // whenever the pacer has a report or an interrupt poll due, and sleeping
  // in between (no fixed-period wake-ups: on a busy machine a waiting thread
  // costs nothing); rethrows the job's exception.
  template <typename Poll>
  void finish(const Pacer& pacer, Poll poll) {
    if (deferred_) {
      const std::function<void(const Ticker&)> job = std::move(deferred_);
      deferred_ = nullptr;
      job([&poll](std::int64_t done, std::int64_t total) {
        poll(done, std::max<std::int64_t>(total, 1));
      });
      return;
    }
    for (;;) {
      const auto due = pacer.next_due();
      if (due == std::chrono::steady_clock::time_point::max()) {
        result_.wait();
        break;
      }
      // At least 1 ms apart, so a zero period cannot make this a spin.
      const auto until = std::max(due, std::chrono::steady_clock::now() + std::chrono::milliseconds(1));
      if (result_.wait_until(until) == std::future_status::ready) break;
      poll(done_.load(std::memory_order_relaxed),
           std::max<std::int64_t>(total_.load(std::memory_order_relaxed), 1));
    }
    result_.get();
  }
  // How far a threaded job is, as its last tick said: done / total in [0, 1]
  // (1 once it has returned; 0 before its first tick and for a job deferred
  // to finish()).
  double share_done() const {
    if (finished_.load(std::memory_order_relaxed)) return 1.0;
    const auto done = static_cast<double>(done_.load(std::memory_order_relaxed));
    const auto total = static_cast<double>(total_.load(std::memory_order_relaxed));
    return total > 0 ? std::clamp(done / total, 0.0, 1.0) : 0.0;
  }

 private:
  std::function<void()> release_;
  std::function<void(const Ticker&)> deferred_;  // the job, when it runs in finish()
  std::atomic<bool> stop_{false}, finished_{false};
  std::atomic<std::int64_t> done_{0}, total_{1};
  std::future<void> result_;
};

void check_inputs(const Pipeline& pipeline, const OptionTable& table, const SolverOptions& options) {
  if (!(options.unit_time_s > 0) || !std::isfinite(options.unit_time_s))
    throw std::invalid_argument("unit time must be a positive number of seconds");
  if (table.num_stages() != pipeline.num_stages())
    throw std::invalid_argument("the profile has " + std::to_string(table.num_stages()) +
                                " stages but the pipeline needs " +
                                std::to_string(pipeline.num_stages()));
}

// Every computation at its fastest option: the plan savings are measured against.
Evaluation all_fastest(Evaluator& evaluator, Index num_computations) {
  const std::vector<OptionIndex> fastest(ix(num_computations), 0);
  const Evaluation baseline = evaluator.evaluate(fastest.data());
  if (!std::isfinite(baseline.energy_j) || !std::isfinite(baseline.iteration_time_s))
    throw std::invalid_argument("the iteration's energy overflows: energies or times are too large");
  return baseline;
}

// The candidates of one solve, by where they come from (refinement.hpp). Only
// `reclaimed` is filled without refinement (then it holds refine=False's plans).
struct CandidateLogs {
  explicit CandidateLogs(Index num_computations)
      : reclaimed(num_computations),
        tight(num_computations),
        fast_end(num_computations),
        plain(num_computations),
        every(num_computations) {}
  PlanLog reclaimed;  // the walk's sampled step plans, reclaimed
  PlanLog tight;      // the same steps rounded up, tightened, reclaimed
  PlanLog fast_end;   // deadlines from the all-fastest time to the first step plan
  PlanLog plain;      // every unit's plan of the walk at the user's unit
  PlanLog every;      // a tiny pipeline's Pareto plans among all of its plans (exhaustive.hpp)
  // In the order their plans enter selection (ties go to the earlier log).
  std::array<const PlanLog*, 5> in_order() const {
    return {&reclaimed, &tight, &fast_end, &plain, &every};
  }
};

// Which step plans become candidates (Sampling in refinement.hpp).
Sampling step_sampling(std::int64_t divisor, const SolverOptions& options) {
  Sampling sampling;
  sampling.stride = divisor;
  sampling.energy_resolution = options.refine ? options.budgets.candidate_energy_resolution : 0.0;
  sampling.max_spacing =
      options.refine ? std::max<std::int64_t>(1, options.budgets.candidate_max_spacing_units) : 1;
  return sampling;
}

// What the min-cut walk left behind, besides the candidates.
struct WalkOutcome {
  StopReason stop_reason = StopReason::kMinimumTime;
  double min_cut_s = 0.0;  // wall time of the loop (and of the plain walk beside it)
};

// refine=False: the loop, then every unit's plan, unreclaimed.
WalkOutcome walk_plain(PhillipsDessouky& steps, double unit, const Sampling& sampling, Pacer& pacer,
                       PlanImprover& improver, CandidateLogs& logs, const Ticker& tick) {
  const auto started = Clock::now();
  WalkOutcome outcome;
  pacer.enter(SolvePart::kUnrefinedWalk);
  outcome.stop_reason = steps.run(pacer);
  outcome.min_cut_s = seconds_since(started);
  pacer.enter(SolvePart::kUnrefinedPlans);
  collect_chain(steps, Chain::kReclaimed, unit, sampling, false, improver, logs.reclaimed, tick);
  return outcome;
}

// refine=True: the loop on the finer quantum with the two chains following
// it, the plain walk at the user's unit, then the fast end and the plain
// plans. Every plain plan (what refine=False returns) is also a candidate:
// the walk on the finer quantum is another Phillips-Dessouky path, and its
// sampled, reclaimed plans do not cover the plain walk's; without these the
// refined frontier was up to 0.19 % worse than the plain one at some of its
// times (SOSP '24 GPT-3 8 x 48; 0.40 % at 8 x 96). The plain walk runs in
// the min-cut phase (before the loop, or beside it on a thread of its own);
// with a divisor of 1 it is the loop itself. Threads beyond the caller's go
// to the reclaimed chain, the tight chain and the plain walk, in that order
// (solver_options.hpp, threads); a job without one runs on the caller's
// thread after the loop.
WalkOutcome walk_refined(const Pipeline& pipeline, const Dag& dag, const OptionTable& table,
                         const SolverOptions& options, PhillipsDessouky& steps, double unit,
                         const Sampling& sampling, double all_fastest_s, Pacer& pacer,
                         PlanImprover& improver, CandidateLogs& logs, const Ticker& tick) {
  const SolverBudgets& budgets = options.budgets;
  const int threads = solver_threads(options);
  const auto started = Clock::now();
  std::unique_ptr<PhillipsDessouky> plain;
  std::unique_ptr<Worker> plain_walk;
  // No plain walk where the user's unit is so coarse that every option
  // collapses to one duration (the walk refuses it): refine=False refuses
  // such a unit too, so there are no plans of its to match.
  bool plain_possible = true;
  if (unit < options.unit_time_s) {
    try {
      plain = std::make_unique<PhillipsDessouky>(pipeline, dag, table, options.unit_time_s, budgets);
    } catch (const std::invalid_argument&) {
      plain_possible = false;
    }
  }
  if (!plain) {
    pacer.skip(SolvePart::kPlainWalk);
    pacer.skip(SolvePart::kPlainWalkRest);
  } else {
    PhillipsDessouky& walk_steps = *plain;
    if (threads >= 4) {
      plain_walk = std::make_unique<Worker>(true, [&walk_steps](const Ticker& worker_tick) {
        walk_steps.run([&worker_tick](PhillipsDessouky::Units done, PhillipsDessouky::Units total) {
          worker_tick(done, total);
        });
      });
    } else {
      pacer.enter(SolvePart::kPlainWalk);
      plain->run(pacer);
    }
  }
  Sampling sparse = sampling;
  sparse.energy_resolution *= static_cast<double>(budgets.tight_chain_coarsening);
  sparse.max_spacing *= std::max<std::int64_t>(1, budgets.tight_chain_coarsening);
  PlanImprover reclaimed_improver(pipeline, dag, table), tight_improver(pipeline, dag, table);
  // run() closes the log when it ends; a chain joined before that (an
  // exception on the way) is released by closing it first.
  const auto close_log = [&steps] { steps.close_log(); };
  Worker reclaimed(
      threads >= 2,
      [&](const Ticker& worker_tick) {
        collect_chain(steps, Chain::kReclaimed, unit, sampling, true, reclaimed_improver,
                      logs.reclaimed, worker_tick);
      },
      close_log);
  Worker tight(
      threads >= 3,
      [&](const Ticker& worker_tick) {
        collect_chain(steps, Chain::kTight, unit, sparse, true, tight_improver, logs.tight,
                      worker_tick);
      },
      close_log);
  WalkOutcome outcome;
  pacer.enter(SolvePart::kFineWalk);
  outcome.stop_reason = steps.run(pacer);
  if (plain_walk) {
    pacer.enter(SolvePart::kPlainWalkRest);
    plain_walk->finish(
        pacer, [&](std::int64_t done, std::int64_t total) { pacer.tick(Phase::kMinCut, done, total); });
    plain_walk.reset();
  }
  outcome.min_cut_s = seconds_since(started);
  // The chains follow the loop (or, without threads of their own, run now).
  pacer.enter(SolvePart::kReclaimedChain);
  reclaimed.finish(pacer, tick);
  pacer.enter(SolvePart::kTightChain);
  tight.finish(pacer, tick);
  pacer.enter(SolvePart::kFastEnd);
  double first_step_s = all_fastest_s;
  bool any = false;
  for (const PlanLog* log : {&logs.reclaimed, &logs.tight})
    for (std::size_t p = 0; p < log->size(); ++p) {
      first_step_s = any ? std::min(first_step_s, log->time_s(p)) : log->time_s(p);
      any = true;
    }
  collect_fast_end(steps, options.unit_time_s, all_fastest_s, first_step_s, improver, logs.fast_end,
                   tick);
  const Sampling every_unit;  // stride 1, every unit: refine=False's plans
  pacer.enter(SolvePart::kPlainPlans);
  if (plain_possible)
    collect_chain(plain ? *plain : steps, Chain::kReclaimed, options.unit_time_s, every_unit, false,
                  improver, logs.plain, tick);
  return outcome;
}

// The plans kept so far, replayed once more on measured times, fastest first.
// Every plan is held as changes: the kept ones in a PlanRows (the local
// search reads them through its own Reader), a candidate added since the
// last selection as its log and index, rebuilt from the log if selection
// keeps it. Holding them as rows cost 2 bytes x computations per plan, twice
// over while a selection built the next set (2.6 GB at 16 x 1024 with
// refine=False, most of a solve's peak); the logs' replay costs far less
// than the evaluation each candidate gets anyway. Every add() must be
// followed by select() while its log is alive.
class ParetoSet {
 public:
  ParetoSet(Evaluator& evaluator, Index num_computations, double blocking_w, double resolution_j,
            Pacer& pacer)
      : evaluator_(evaluator),
        n_(num_computations),
        blocking_w_(blocking_w),
        resolution_j_(resolution_j),
        pacer_(pacer),
        plans_(num_computations) {}

  // Replays the plans worth keeping from `log` and adds them (not yet
  // selected). With `part_of`, the log's records are [first, first +
  // log.size()) of `count` that make up the current part's progress;
  // without, its progress is reported but is not the part's.
  struct PartOf {
    std::int64_t first, count;
  };
  void add(const PlanLog& log, Phase phase, std::optional<PartOf> part_of = std::nullopt) {
    std::vector<double> times(log.size()), energies(log.size());
    for (std::size_t k = 0; k < log.size(); ++k) {
      times[k] = log.time_s(k);
      energies[k] = log.energy_j(k);
    }
    std::vector<std::size_t> wanted = frontier_of(times, energies, blocking_w_, resolution_j_);
    std::sort(wanted.begin(), wanted.end());  // the order rebuild() visits plans in
    log.rebuild(wanted, [&](std::size_t k, const OptionIndex* choice) {
      const auto done = static_cast<std::int64_t>(k), total = static_cast<std::int64_t>(wanted.size());
      if (part_of)
        pacer_.tick(phase, part_of->first + done * static_cast<std::int64_t>(log.size()) / total,
                    part_of->count);
      else pacer_.tick_within(phase, done, total);
      const Evaluation e = evaluator_.evaluate(choice);
      pending_.push_back(Source{&log, wanted[k]});
      time_s_.push_back(e.iteration_time_s);
      energy_j_.push_back(e.energy_j);
      before_j_.push_back(log.energy_before_j(wanted[k]) +
                          blocking_w_ * (e.iteration_time_s - log.time_s(wanted[k])));
    });
  }

  // Keeps only the Pareto plans of everything added, fastest first.
  void select() {
    const std::size_t kept_before = time_s_.size() - pending_.size();
    const std::vector<std::size_t> chosen = frontier_of(time_s_, energy_j_, blocking_w_, resolution_j_);
    // The chosen candidates of each log, rebuilt in the log's order into
    // changes of their own (one replay per log); `where[j]` is chosen plan
    // j's (log's store, or none for a kept plan; plan in that store).
    struct FromLog {
      const PlanLog* log;
      std::vector<std::pair<std::size_t, std::size_t>> wanted;  // (index in the log, j)
      PlanRows rows;
    };
    std::vector<FromLog> from_logs;
    std::vector<std::pair<std::size_t, std::size_t>> where(chosen.size());
    constexpr std::size_t kKept = static_cast<std::size_t>(-1);
    for (std::size_t j = 0; j < chosen.size(); ++j) {
      const std::size_t k = chosen[j];
      if (k < kept_before) {
        where[j] = {kKept, k};
        continue;
      }
      const Source& source = pending_[k - kept_before];
      auto it = std::find_if(from_logs.begin(), from_logs.end(),
                             [&](const FromLog& entry) { return entry.log == source.log; });
      if (it == from_logs.end())
        it = from_logs.insert(from_logs.end(), FromLog{source.log, {}, PlanRows(n_)});
      it->wanted.emplace_back(source.index, j);
    }
    for (std::size_t f = 0; f < from_logs.size(); ++f) {
      FromLog& from = from_logs[f];
      std::sort(from.wanted.begin(), from.wanted.end());
      std::vector<std::size_t> wanted(from.wanted.size());
      for (std::size_t w = 0; w < wanted.size(); ++w) wanted[w] = from.wanted[w].first;
      from.log->rebuild(wanted, [&](std::size_t w, const OptionIndex* choice) {
        where[from.wanted[w].second] = {f, from.rows.size()};
        from.rows.append(choice);
      });
    }
    // The next set, in the chosen (time) order, read from the kept plans and
    // the logs' stores.
    PlanRows plans(n_);
    PlanRows::Reader kept(plans_);
    std::vector<PlanRows::Reader> logged;
    logged.reserve(from_logs.size());
    for (const FromLog& from : from_logs) logged.emplace_back(from.rows);
    std::vector<double> time_s, energy_j, before_j;
    for (std::size_t j = 0; j < chosen.size(); ++j) {
      const auto [store, index] = where[j];
      plans.append(store == kKept ? kept.row(index) : logged[store].row(index));
      const std::size_t k = chosen[j];
      time_s.push_back(time_s_[k]);
      energy_j.push_back(energy_j_[k]);
      before_j.push_back(std::max(before_j_[k], energy_j_[k]));
    }
    plans.shrink_to_fit();
    plans_ = std::move(plans);
    pending_.clear();
    time_s_ = std::move(time_s);
    energy_j_ = std::move(energy_j);
    before_j_ = std::move(before_j);
  }

  const PlanRows& plans() const { return plans_; }
  const std::vector<double>& time_s() const { return time_s_; }
  const std::vector<double>& energy_j() const { return energy_j_; }

  void move_into(FrontierResult& result) {
    result.choices = std::move(plans_);
    plans_ = PlanRows(n_);
    result.iteration_time_s = std::move(time_s_);
    result.energy_j = std::move(energy_j_);
    result.energy_before_reclaim_j = std::move(before_j_);
  }

 private:
  // Where an added, not yet selected candidate is rebuilt from.
  struct Source {
    const PlanLog* log;
    std::size_t index;
  };
  Evaluator& evaluator_;  // its replay scratch is reused
  Index n_;
  double blocking_w_, resolution_j_;
  Pacer& pacer_;
  PlanRows plans_;               // the kept plans (the first entries below)
  std::vector<Source> pending_;  // the added ones (the last entries below)
  std::vector<double> time_s_, energy_j_, before_j_;
};

// The median group's count of useful options: how coarse the clock table is.
double median_options(const OptionTable& table) {
  std::vector<double> counts;
  for (GroupId g(0); g.value() < table.num_groups(); ++g)
    counts.push_back(static_cast<double>(table.num_options(g)));
  return counts.empty() ? 1.0 : median_of(counts);
}

// The local search's whole budget (work units) for this pipeline and table.
double search_budget(const Dag& dag, const OptionTable& table, const SolverBudgets& budgets) {
  return local_search_budget(static_cast<double>(dag.num_nodes()),
                             static_cast<double>(dag.num_nodes() + dag.num_edges()),
                             median_options(table), budgets);
}

// Local search in rounds, each from the frontier the one before left (a good
// structure found at one deadline spreads to its neighbours); a round splits
// its deadlines and budget in two halves, this thread's and a second thread's
// when there is one. Returns how many plans it found.
std::int64_t search_in_rounds(const Pipeline& pipeline, const Dag& dag, const OptionTable& table,
                              const SolverOptions& options, Pacer& pacer, PlanImprover& improver,
                              ParetoSet& kept) {
  const SolverBudgets& budgets = options.budgets;
  const double budget = search_budget(dag, table, budgets);
  const std::int64_t rounds = std::max<std::int64_t>(1, budgets.local_search_rounds);
  const std::size_t grid = ix(budgets.local_search_max_grid);
  // The hull pass's share, where it pays for at least one search (solver_options.hpp).
  const double search_work =
      budgets.hull_search_work_per_computation * static_cast<double>(pipeline.size());
  const double affordable = std::floor(budget * budgets.hull_search_share / std::max(search_work, 1.0));
  const auto hull_count = static_cast<std::size_t>(std::min(
      affordable, static_cast<double>(std::max<std::int64_t>(0, budgets.hull_search_deadlines))));
  const double hull_budget = hull_count > 0 ? budget * budgets.hull_search_share : 0.0;
  const double rounds_budget = budget - hull_budget;
  const bool threaded = solver_threads(options) >= 2;
  PlanImprover second(pipeline, dag, table);
  std::int64_t searched = 0;
  // One job's search on each of the two improvers (the second on a thread
  // of its own when there is one, else after the first), then selection.
  // Progress is in work units of the whole search: the job pair spends
  // [start_work, start_work + work) of it. Side by side, the pair is as far
  // as its slower half (else the bar would wait at the round's end for the
  // other half); one after the other, each half is half of it.
  const auto in_two_jobs = [&](double start_work, double work, const auto& job) {
    PlanLog found(pipeline.size()), found_second(pipeline.size());
    std::optional<Worker> other;
    const auto report_of = [&](int half) {
      return [&, half](std::int64_t done, std::int64_t total) {
        double within =
            total > 0 ? std::min(1.0, static_cast<double>(done) / static_cast<double>(total)) : 0.0;
        if (threaded && half == 0) within = std::min(within, other->share_done());
        const double span = threaded ? work : work / 2;
        const double at = start_work + (threaded ? 0.0 : half * span) + within * span;
        pacer.tick(Phase::kLocalSearch, static_cast<std::int64_t>(at),
                   static_cast<std::int64_t>(std::max(budget, 1.0)));
      };
    };
    {
      other.emplace(threaded, [&](const Ticker& worker_tick) {
        job(Share{1, 2}, second, found_second, worker_tick);
      });
      job(Share{0, 2}, improver, found, report_of(0));
      other->finish(pacer, report_of(1));  // the other half's progress
      other.reset();
      report_of(1)(1, 1);  // the pair is done (a finished thread reports nothing more)
    }
    searched += static_cast<std::int64_t>(found.size() + found_second.size());
    kept.add(found, Phase::kLocalSearch);
    kept.add(found_second, Phase::kLocalSearch);
    kept.select();
  };
  const auto round_of = [&](std::int64_t share) {
    return [&, share](Share part, PlanImprover& with, PlanLog& log, const Ticker& tick) {
      search_deadlines(kept.plans(), kept.time_s(), grid, share, part, with, log, tick);
    };
  };
  const double round_work = rounds_budget / static_cast<double>(rounds);
  for (std::int64_t round = 0; round < rounds; ++round)
    in_two_jobs(static_cast<double>(round) * round_work, round_work,
                round_of(static_cast<std::int64_t>(rounds_budget) / rounds / 2));
  if (hull_budget >= 1.0) {
    // The hull pass, or, where no plan is that far above the hull, one more
    // round with its share.
    const std::vector<double> deadlines =
        hull_gap_deadlines(kept.time_s(), kept.energy_j(), options.unit_time_s, hull_count);
    if (deadlines.empty()) {
      in_two_jobs(rounds_budget, hull_budget, round_of(static_cast<std::int64_t>(hull_budget) / 2));
    } else {
      const auto work_each =
          static_cast<std::int64_t>(hull_budget / static_cast<double>(deadlines.size()));
      in_two_jobs(rounds_budget, hull_budget,
                  [&](Share part, PlanImprover& with, PlanLog& log, const Ticker& tick) {
                    search_hull_gaps(kept.plans(), kept.time_s(), deadlines, work_each, part, with, log,
                                     tick);
                  });
    }
  }
  return searched;
}

}  // namespace

// The phases of a solve, each named above: the min-cut walk and its
// candidates, selection, local search (refine=True only).
FrontierResult solve_frontier(const Pipeline& pipeline, const Dag& dag, const OptionTable& table,
                              const SolverOptions& options) {
  check_inputs(pipeline, table, options);
  Pacer pacer(options);
  Evaluator evaluator(pipeline, dag, table);
  FrontierResult result;
  result.num_computations = pipeline.size();
  result.baseline = all_fastest(evaluator, pipeline.size());

  const std::int64_t divisor = unit_divisor(pipeline, dag, table, options);
  const double unit = options.unit_time_s / static_cast<double>(divisor);
  PhillipsDessouky steps(pipeline, dag, table, unit, options.budgets, options.unit_time_s);
  const Sampling sampling = step_sampling(divisor, options);
  PlanImprover improver(pipeline, dag, table);
  CandidateLogs logs(pipeline.size());
  const Phase walk_phase = options.refine ? Phase::kReclaim : Phase::kCandidates;
  const Ticker tick = [&](std::int64_t done, std::int64_t total) {
    pacer.tick(walk_phase, done, total);
  };
  // A tiny pipeline's every plan, where that is affordable: an exact frontier,
  // which the local search cannot improve on.
  const std::int64_t plan_count =
      options.refine ? affordable_plan_count(pipeline, dag, table, options.budgets.exhaustive_max_work)
                     : -1;
  if (options.refine) {
    // The search's share of the progress, from its budget (solve_parts.hpp).
    const double elements = static_cast<double>(dag.num_nodes() + dag.num_edges());
    const double search_s = plan_count > 0
                                ? static_cast<double>(plan_count) * elements / kReplayWorkPerSecond
                                : search_budget(dag, table, options.budgets) / kSearchWorkPerSecond;
    pacer.predict_search(search_s, predicted_rest_s(static_cast<double>(pipeline.size()),
                                                    median_options(table), solver_threads(options)));
  }
  const auto started = Clock::now();
  const WalkOutcome walked =
      options.refine ? walk_refined(pipeline, dag, table, options, steps, unit, sampling,
                                    result.baseline.iteration_time_s, pacer, improver, logs, tick)
                     : walk_plain(steps, unit, sampling, pacer, improver, logs, tick);
  result.stop_reason = walked.stop_reason;
  result.phase_seconds[static_cast<int>(Phase::kMinCut)] = walked.min_cut_s;
  result.steps = steps.units_done();
  result.cuts = steps.num_cuts();  // the plain walk's are not counted (its time is the phase's)
  result.unit_time_s = unit;
  result.min_time_units = steps.min_units();
  result.max_time_units = steps.max_units();
  result.phase_seconds[static_cast<int>(walk_phase)] = seconds_since(started) - walked.min_cut_s;

  if (plan_count > 0) {
    pacer.enter(SolvePart::kLocalSearch);  // in its place, and before the selection
    const auto every_started = Clock::now();
    record_every_pareto_plan(
        pipeline, dag, table, plan_count, logs.every,
        [&](std::int64_t done, std::int64_t total) { pacer.tick(Phase::kLocalSearch, done, total); });
    result.phase_seconds[static_cast<int>(Phase::kLocalSearch)] = seconds_since(every_started);
  }

  ParetoSet kept(evaluator, pipeline.size(), evaluator.pipeline_blocking_w(),
                 options.budgets.plan_energy_resolution * result.baseline.energy_j, pacer);
  // The selection's progress: the logs' records in order, and a tenth more
  // for select().
  if (plan_count <= 0) pacer.enter(SolvePart::kSelection);
  std::int64_t records = 0;
  for (const PlanLog* log : logs.in_order()) records += static_cast<std::int64_t>(log->size());
  std::int64_t first = 0;
  for (const PlanLog* log : logs.in_order()) {
    using PartOf = ParetoSet::PartOf;
    kept.add(*log, walk_phase,
             plan_count <= 0 ? std::optional<PartOf>(PartOf{first, records + records / 10 + 1})
                             : std::nullopt);
    first += static_cast<std::int64_t>(log->size());
  }
  kept.select();

  std::int64_t searched = 0;
  if (options.refine && plan_count <= 0) {
    const auto search_started = Clock::now();
    pacer.enter(SolvePart::kLocalSearch);
    searched = search_in_rounds(pipeline, dag, table, options, pacer, improver, kept);
    result.phase_seconds[static_cast<int>(Phase::kLocalSearch)] = seconds_since(search_started);
  }
  for (const PlanLog* log : logs.in_order())
    result.candidates += static_cast<std::int64_t>(log->size());
  result.candidates += searched;
  kept.move_into(result);
  return result;
}

}  // namespace perseus
