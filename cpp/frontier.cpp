#include "frontier.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>

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

// The min-cut loop's quantum when refining: the user's unit divided by an
// integer (SolverBudgets::units_per_option_gap and its bounds).
std::int64_t unit_divisor(const Pipeline& pipeline, const Dag& dag, const OptionTable& table,
                          const SolverOptions& options) {
  if (!options.refine) return 1;
  std::vector<double> gaps;
  for (Index g = 0; g < table.num_groups(); ++g)
    for (Index k = 1; k < table.num_options(g); ++k)
      gaps.push_back(table.time_s(g, k) - table.time_s(g, k - 1));
  if (gaps.empty()) return 1;
  std::nth_element(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(gaps.size() / 2),
                   gaps.end());
  const double median_gap = gaps[gaps.size() / 2];
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

 private:
  std::function<void()> release_;
  std::function<void(const Ticker&)> deferred_;  // the job, when it runs in finish()
  std::atomic<bool> stop_{false};
  std::atomic<std::int64_t> done_{0}, total_{1};
  std::future<void> result_;
};

// Plans gathered from logs, replayed once more on measured times.
struct Gathered {
  std::vector<OptionIndex> rows;
  std::vector<double> time_s, energy_j, before_j;
};

}  // namespace

FrontierResult solve_frontier(const Pipeline& pipeline, const Dag& dag, const OptionTable& table,
                              const SolverOptions& options) {
  if (!(options.unit_time_s > 0) || !std::isfinite(options.unit_time_s))
    throw std::invalid_argument("unit time must be a positive number of seconds");
  if (table.num_stages() != pipeline.num_stages())
    throw std::invalid_argument("the profile has " + std::to_string(table.num_stages()) +
                                " stages but the pipeline needs " +
                                std::to_string(pipeline.num_stages()));
  Pacer pacer(options);
  FrontierResult result;
  result.num_computations = pipeline.size();
  const auto n = ix(pipeline.size());
  const SolverBudgets& budgets = options.budgets;
  Evaluator evaluator(pipeline, dag, table);
  {
    const std::vector<OptionIndex> fastest(n, 0);
    result.baseline = evaluator.evaluate(fastest.data());
  }
  if (!std::isfinite(result.baseline.energy_j) || !std::isfinite(result.baseline.iteration_time_s))
    throw std::invalid_argument("the iteration's energy overflows: energies or times are too large");

  // Min cut, and when refining the two candidate chains, each on a thread
  // of its own, following the loop step by step (refinement.hpp); then the
  // fast end.
  auto started = Clock::now();
  const std::int64_t divisor = unit_divisor(pipeline, dag, table, options);
  const double unit = options.unit_time_s / static_cast<double>(divisor);
  PhillipsDessouky steps(pipeline, dag, table, unit, budgets);
  Sampling sampling;
  sampling.stride = divisor;
  sampling.energy_resolution = options.refine ? budgets.candidate_energy_resolution : 0.0;
  sampling.max_spacing =
      options.refine ? std::max<std::int64_t>(1, budgets.candidate_max_spacing_units) : 1;
  PlanImprover improver(pipeline, dag, table);
  // Logs: the reclaimed chain, the tight chain, the fast end, the plain plans.
  std::vector<PlanLog> logs;
  for (int k = 0; k < 4; ++k) logs.emplace_back(pipeline.size());
  const Phase walk = options.refine ? Phase::kReclaim : Phase::kCandidates;
  const Ticker tick = [&](std::int64_t done, std::int64_t total) { pacer.tick(walk, done, total); };
  // Every plain plan (what refine=False returns) is also a candidate when
  // refining. The walk on the finer quantum is another Phillips-Dessouky
  // path, and its sampled, reclaimed plans do not cover the plain walk's:
  // without these the refined frontier was up to 0.19 % worse than the
  // plain one at some of its times (SOSP '24 GPT-3 8 x 48; 0.40 % at
  // 8 x 96). The plain walk runs in the min-cut phase (before the loop, or
  // beside it on a thread of its own), its plans are taken after the
  // chains; with a divisor of 1 it is the loop itself. Threads beyond the
  // caller's go to the reclaimed chain, the tight chain and the plain walk,
  // in that order (solver_options.hpp, threads); a chain without one runs on
  // the caller's thread after the loop.
  const int threads = solver_threads(options);
  std::unique_ptr<PhillipsDessouky> plain;
  std::unique_ptr<Worker> plain_walk;
  if (options.refine && divisor > 1) {
    plain = std::make_unique<PhillipsDessouky>(pipeline, dag, table, options.unit_time_s, budgets);
    PhillipsDessouky& walk_steps = *plain;
    if (threads >= 4) {
      plain_walk = std::make_unique<Worker>(true, [&walk_steps](const Ticker& worker_tick) {
        walk_steps.run([&worker_tick](PhillipsDessouky::Units done, PhillipsDessouky::Units total) {
          worker_tick(done, total);
        });
      });
    } else {
      plain->run(pacer);
    }
  }
  if (options.refine) {
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
          collect_chain(steps, Chain::kReclaimed, unit, sampling, true, reclaimed_improver, logs[0],
                        worker_tick);
        },
        close_log);
    Worker tight(
        threads >= 3,
        [&](const Ticker& worker_tick) {
          collect_chain(steps, Chain::kTight, unit, sparse, true, tight_improver, logs[1], worker_tick);
        },
        close_log);
    result.stop_reason = steps.run(pacer);
    if (plain_walk) {
      plain_walk->finish(pacer, [&](std::int64_t done, std::int64_t total) {
        pacer.tick(Phase::kMinCut, done, total);
      });
      plain_walk.reset();
    }
    result.phase_seconds[static_cast<int>(Phase::kMinCut)] = seconds_since(started);
    started = Clock::now();
    // The chains follow the loop (or, without threads of their own, run now).
    const auto report = [&](std::int64_t done, std::int64_t total) { pacer.tick(walk, done, total); };
    reclaimed.finish(pacer, report);
    tight.finish(pacer, report);
    double first_step_s = result.baseline.iteration_time_s;
    bool any = false;
    for (int k = 0; k < 2; ++k)
      for (std::size_t p = 0; p < logs[ix(k)].size(); ++p) {
        first_step_s = any ? std::min(first_step_s, logs[ix(k)].time_s(p)) : logs[ix(k)].time_s(p);
        any = true;
      }
    collect_fast_end(steps, options.unit_time_s, result.baseline.iteration_time_s, first_step_s,
                     improver, logs[2], tick);
    const Sampling every_unit;  // stride 1, every unit: refine=False's plans
    collect_chain(plain ? *plain : steps, Chain::kReclaimed, options.unit_time_s, every_unit, false,
                  improver, logs[3], tick);
    plain.reset();
  } else {
    result.stop_reason = steps.run(pacer);
    result.phase_seconds[static_cast<int>(Phase::kMinCut)] = seconds_since(started);
    started = Clock::now();
    collect_chain(steps, Chain::kReclaimed, unit, sampling, false, improver, logs[0], tick);
  }
  result.steps = steps.units_done();
  result.cuts = steps.num_cuts();  // the plain walk's are not counted (its time is the phase's)
  result.unit_time_s = unit;
  result.min_time_units = steps.min_units();
  result.max_time_units = steps.max_units();
  result.phase_seconds[static_cast<int>(walk)] = seconds_since(started);

  const double blocking_w = evaluator.pipeline_blocking_w();
  const double resolution_j = budgets.plan_energy_resolution * result.baseline.energy_j;
  // The plans worth keeping from a log, replayed once more on measured times.
  Gathered all;
  auto gather = [&](const PlanLog& log, Phase phase) {
    std::vector<double> times(log.size()), energies(log.size());
    for (std::size_t k = 0; k < log.size(); ++k) {
      times[k] = log.time_s(k);
      energies[k] = log.energy_j(k);
    }
    std::vector<std::size_t> wanted = frontier_of(times, energies, blocking_w, resolution_j);
    std::sort(wanted.begin(), wanted.end());  // the order rebuild() visits plans in
    log.rebuild(wanted, [&](std::size_t k, const OptionIndex* choice) {
      pacer.tick(phase, static_cast<std::int64_t>(k), static_cast<std::int64_t>(wanted.size()));
      const Evaluation e = evaluator.evaluate(choice);
      all.rows.insert(all.rows.end(), choice, choice + n);
      all.time_s.push_back(e.iteration_time_s);
      all.energy_j.push_back(e.energy_j);
      all.before_j.push_back(log.energy_before_j(wanted[k]) +
                             blocking_w * (e.iteration_time_s - log.time_s(wanted[k])));
    });
  };
  // Keeps only the Pareto plans of `all`, fastest first.
  auto select = [&]() {
    Gathered kept;
    for (const std::size_t k : frontier_of(all.time_s, all.energy_j, blocking_w, resolution_j)) {
      kept.rows.insert(kept.rows.end(), all.rows.begin() + static_cast<std::ptrdiff_t>(k * n),
                       all.rows.begin() + static_cast<std::ptrdiff_t>((k + 1) * n));
      kept.time_s.push_back(all.time_s[k]);
      kept.energy_j.push_back(all.energy_j[k]);
      kept.before_j.push_back(std::max(all.before_j[k], all.energy_j[k]));
    }
    all = std::move(kept);
  };
  for (const PlanLog& log : logs) gather(log, walk);
  select();

  std::int64_t searched = 0;
  if (options.refine) {
    started = Clock::now();
    const double elements = static_cast<double>(dag.num_nodes() + dag.num_edges());
    // The floor shrinks as pipelines grow past local_search_floor_computations:
    // tiny ones get much search, large ones their per-element share.
    const double small = std::min(1.0, budgets.local_search_floor_computations /
                                           std::max(static_cast<double>(dag.num_nodes()), 1.0));
    const double floor = budgets.local_search_work_floor * small * small;
    const double budget = std::min(std::max(budgets.local_search_work_per_element * elements, floor),
                                   budgets.local_search_work_cap);
    // Rounds: each starts from the frontier the one before left, so a good
    // structure found at one deadline spreads to its neighbours.
    const std::int64_t rounds = std::max<std::int64_t>(1, budgets.local_search_rounds);
    // Each round is split in two jobs, half the deadlines (and half the
    // budget) each: this thread's and a second thread's when there is one.
    PlanImprover second(pipeline, dag, table);
    for (std::int64_t round = 0; round < rounds; ++round) {
      PlanLog found(pipeline.size()), found_second(pipeline.size());
      const std::int64_t share = static_cast<std::int64_t>(budget) / rounds / 2;
      const std::size_t grid = ix(budgets.local_search_max_grid);
      {
        Worker other(threads >= 2, [&](const Ticker& worker_tick) {
          search_deadlines(all.rows, all.time_s, grid, share, Share{1, 2}, second, found_second,
                           worker_tick);
        });
        search_deadlines(all.rows, all.time_s, grid, share, Share{0, 2}, improver, found,
                         [&](std::int64_t done, std::int64_t total) {
                           pacer.tick(Phase::kLocalSearch, done + round * total, total * rounds);
                         });
        other.finish(pacer, [&](std::int64_t done, std::int64_t total) {  // the other half's progress
          pacer.tick(Phase::kLocalSearch, done + round * total, total * rounds);
        });
      }
      searched += static_cast<std::int64_t>(found.size() + found_second.size());
      gather(found, Phase::kLocalSearch);
      gather(found_second, Phase::kLocalSearch);
      select();
    }
    result.phase_seconds[static_cast<int>(Phase::kLocalSearch)] = seconds_since(started);
  }
  for (const PlanLog& log : logs) result.candidates += static_cast<std::int64_t>(log.size());
  result.candidates += searched;
  result.choices = std::move(all.rows);
  result.iteration_time_s = std::move(all.time_s);
  result.energy_j = std::move(all.energy_j);
  result.energy_before_reclaim_j = std::move(all.before_j);
  return result;
}

}  // namespace perseus
