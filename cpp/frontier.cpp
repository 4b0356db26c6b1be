#include "frontier.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>

#include "max_flow.hpp"

namespace perseus {
namespace {

using Units = std::int64_t;

// One Phillips-Dessouky run over quantised durations. Owns every working
// array, allocated once; step() only appends to the step log, which is
// reserved for the expected number of steps.
class PhillipsDessouky {
 public:
  PhillipsDessouky(const Pipeline& pipeline, const Dag& dag, const OptionTable& table,
                   const SolverOptions& options);
  PhillipsDessouky(const PhillipsDessouky&) = delete;
  PhillipsDessouky& operator=(const PhillipsDessouky&) = delete;

  // Runs every step; records the duration changes of each step.
  void run();

  Index n() const { return n_; }
  Units min_units() const { return min_units_; }
  Units max_units() const { return max_units_; }
  std::int64_t steps() const { return static_cast<std::int64_t>(step_end_.size()); }
  // Replays step k's changes onto `durations` (step 0's start: all maximal).
  void apply_step(std::int64_t k, std::vector<Units>& durations) const {
    const std::size_t begin = k == 0 ? 0 : step_end_[static_cast<std::size_t>(k) - 1];
    for (std::size_t c = begin; c < step_end_[static_cast<std::size_t>(k)]; ++c)
      durations[static_cast<std::size_t>(log_[c].first)] = log_[c].second;
  }
  void initial_durations(std::vector<Units>& durations) const {
    for (Index i = 0; i < n_; ++i) durations[static_cast<std::size_t>(i)] = quant(i).max_duration();
  }
  OptionIndex option_for(Index i, Units d) const { return quant(i).option_for(d); }
  // Model iteration time after step k; k = -1: the starting point.
  Units units_after(std::int64_t k) const {
    return k < 0 ? max_units_ : step_units_[static_cast<std::size_t>(k)];
  }

 private:
  const QuantisedGroup& quant(Index i) const {
    return groups_[static_cast<std::size_t>(group_[static_cast<std::size_t>(i)])];
  }
  // Earliest starts and latest finishes for `deadline` (or the makespan if < 0);
  // returns the makespan.
  Units compute_times(Units deadline);
  // One min-cut step; false when the minimum time is reached.
  bool step();

  const Dag& dag_;
  Index n_;
  std::vector<QuantisedGroup> groups_;
  std::vector<Index> group_;
  std::vector<Units> d_, earliest_start_, latest_finish_;
  Units makespan_ = 0, min_units_ = 0, max_units_ = 0;
  double tolerance_ = 0.0;
  std::function<bool(std::int64_t, std::int64_t)> progress_;

  // Flow network: s=0, t=1, a_i = 2+2i, b_i = 3+2i, super source/sink last.
  FlowNetwork net_;
  Index super_source_, super_sink_;
  std::vector<Index> work_arc_, supply_arc_, demand_arc_;  // per computation
  std::vector<Index> dep_arc_;                             // per DAG edge, successor CSR order
  std::vector<Index> source_arc_, sink_arc_;               // per computation, -1 if none
  Index return_arc_ = -1;
  std::vector<double> lower_;  // lower bound per computation this step
  std::vector<char> critical_;
  std::vector<Index> lengthened_;  // scratch
  std::vector<std::pair<Index, Units>> log_;
  std::vector<std::size_t> step_end_;
  std::vector<Units> step_units_;  // model iteration time after each step
};

Index aoa_start(Index i) { return 2 + 2 * i; }
Index aoa_end(Index i) { return 3 + 2 * i; }

PhillipsDessouky::PhillipsDessouky(const Pipeline& pipeline, const Dag& dag,
                                   const OptionTable& table, const SolverOptions& options)
    : dag_(dag),
      n_(pipeline.size()),
      net_(2 * pipeline.size() + 4),
      super_source_(2 * pipeline.size() + 2),
      super_sink_(2 * pipeline.size() + 3) {
  const auto n = static_cast<std::size_t>(n_);
  groups_.reserve(static_cast<std::size_t>(table.num_groups()));
  bool any_range = false;
  double scale = 0.0;
  for (Index g = 0; g < table.num_groups(); ++g) {
    groups_.emplace_back(table, g, options.unit_time_s, options.blocking_power_w);
    const QuantisedGroup& q = groups_.back();
    if (q.max_duration() > q.min_duration()) {
      any_range = true;
      scale = std::max(scale, q.cost(q.min_duration()) - q.cost(q.max_duration()));
    }
  }
  if (!any_range)
    throw std::invalid_argument(
        "unit_time " + std::to_string(options.unit_time_s) +
        " s is so coarse that every stage's options quantise to a single duration; "
        "use a smaller unit_time");
  // Costs are joules of order one per unit; the tolerance only absorbs rounding.
  tolerance_ = 1e-10 * std::max(scale, 1e-300);
  progress_ = options.progress;

  group_.resize(n);
  for (Index i = 0; i < n_; ++i) group_[static_cast<std::size_t>(i)] = group_of(pipeline.computation(i));
  d_.resize(n);
  earliest_start_.resize(n);
  latest_finish_.resize(n);
  lower_.assign(n, 0.0);
  critical_.assign(n, 0);
  lengthened_.reserve(n);

  work_arc_.resize(n);
  supply_arc_.resize(n);
  demand_arc_.resize(n);
  source_arc_.assign(n, -1);
  sink_arc_.assign(n, -1);
  for (Index i = 0; i < n_; ++i) {
    const auto s = static_cast<std::size_t>(i);
    work_arc_[s] = net_.add_arc(aoa_start(i), aoa_end(i));
    supply_arc_[s] = net_.add_arc(super_source_, aoa_end(i));
    demand_arc_[s] = net_.add_arc(aoa_start(i), super_sink_);
    if (dag.predecessors_begin(i) == dag.predecessors_end(i)) source_arc_[s] = net_.add_arc(0, aoa_start(i));
    if (dag.successors_begin(i) == dag.successors_end(i)) sink_arc_[s] = net_.add_arc(aoa_end(i), 1);
    for (const Index* v = dag.successors_begin(i); v != dag.successors_end(i); ++v)
      dep_arc_.push_back(net_.add_arc(aoa_end(i), aoa_start(*v)));
  }
  return_arc_ = net_.add_arc(1, 0);
  net_.finalize();

  for (Index i = 0; i < n_; ++i) d_[static_cast<std::size_t>(i)] = quant(i).min_duration();
  min_units_ = compute_times(-1);
  for (Index i = 0; i < n_; ++i) d_[static_cast<std::size_t>(i)] = quant(i).max_duration();
  max_units_ = compute_times(-1);
  // The step log is the only thing the loop appends to: size it for the
  // expected steps (a step changes a few computations) so it rarely grows.
  const auto expected_steps = static_cast<std::size_t>(max_units_ - min_units_ + 1);
  step_end_.reserve(expected_steps);
  step_units_.reserve(expected_steps);
  log_.reserve(expected_steps * 8);
}

Units PhillipsDessouky::compute_times(Units deadline) {
  Units makespan = 0;
  for (const Index v : dag_.topological_order()) {
    Units start = 0;
    for (const Index* p = dag_.predecessors_begin(v); p != dag_.predecessors_end(v); ++p)
      start = std::max(start, earliest_start_[static_cast<std::size_t>(*p)] + d_[static_cast<std::size_t>(*p)]);
    earliest_start_[static_cast<std::size_t>(v)] = start;
    makespan = std::max(makespan, start + d_[static_cast<std::size_t>(v)]);
  }
  const Units horizon = deadline < 0 ? makespan : deadline;
  const auto& order = dag_.topological_order();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Index v = *it;
    Units latest = horizon;
    for (const Index* s = dag_.successors_begin(v); s != dag_.successors_end(v); ++s)
      latest = std::min(latest, latest_finish_[static_cast<std::size_t>(*s)] - d_[static_cast<std::size_t>(*s)]);
    latest_finish_[static_cast<std::size_t>(v)] = latest;
  }
  makespan_ = makespan;
  return makespan;
}

bool PhillipsDessouky::step() {
  const Units T = makespan_;  // earliest_start_ / latest_finish_ are current for d_
  double total_lower = 0.0;
  std::size_t edge = 0;
  for (Index i = 0; i < n_; ++i) {
    const auto s = static_cast<std::size_t>(i);
    const Units d = d_[s], start = earliest_start_[s];
    const bool critical = latest_finish_[s] - start - d == 0;
    critical_[s] = critical;
    lower_[s] = 0.0;
    if (critical) {
      const QuantisedGroup& q = quant(i);
      const double upper = d > q.min_duration() ? q.cost(d - 1) - q.cost(d) : kInfinity;
      const double lower = d < q.max_duration() ? q.cost(d) - q.cost(d + 1) : 0.0;
      lower_[s] = lower;
      total_lower += lower;
      net_.set_capacity(work_arc_[s], upper == kInfinity ? kInfinity : std::max(upper - lower, 0.0));
      net_.set_capacity(supply_arc_[s], lower);
      net_.set_capacity(demand_arc_[s], lower);
    } else {
      net_.clear_arc(work_arc_[s]);
      net_.clear_arc(supply_arc_[s]);
      net_.clear_arc(demand_arc_[s]);
    }
    if (source_arc_[s] >= 0) net_.set_capacity(source_arc_[s], critical && start == 0 ? kInfinity : 0.0);
    if (sink_arc_[s] >= 0) net_.set_capacity(sink_arc_[s], critical && start + d == T ? kInfinity : 0.0);
    // A dependency arc b_i -> a_v is critical when v's latest start equals i's
    // earliest finish (both ends are then critical too).
    for (const Index* v = dag_.successors_begin(i); v != dag_.successors_end(i); ++v, ++edge) {
      const auto vs = static_cast<std::size_t>(*v);
      net_.set_capacity(dep_arc_[edge], latest_finish_[vs] - d_[vs] == start + d ? kInfinity : 0.0);
    }
  }

  // Feasible flow honouring the lower bounds.
  net_.set_capacity(return_arc_, kInfinity);
  const double feasible = net_.max_flow(super_source_, super_sink_, tolerance_);
  if (feasible < total_lower - 1e-9 * std::max(1.0, total_lower))
    throw std::logic_error("Phillips-Dessouky: no feasible flow on the critical subgraph");
  net_.clear_arc(return_arc_);
  for (Index i = 0; i < n_; ++i) {
    net_.clear_arc(supply_arc_[static_cast<std::size_t>(i)]);
    net_.clear_arc(demand_arc_[static_cast<std::size_t>(i)]);
  }
  // An infinite cut means some critical path cannot shrink any further.
  if (net_.has_infinite_path(0, 1)) return false;
  net_.max_flow(0, 1, tolerance_);
  const std::vector<Index>& source_side = net_.reachable_from(0, tolerance_);

  const std::size_t log_begin = log_.size();
  lengthened_.clear();
  for (Index i = 0; i < n_; ++i) {
    const auto s = static_cast<std::size_t>(i);
    if (!critical_[s]) continue;
    const bool a_in = source_side[static_cast<std::size_t>(aoa_start(i))] >= 0;
    const bool b_in = source_side[static_cast<std::size_t>(aoa_end(i))] >= 0;
    if (a_in && !b_in) {
      if (d_[s] <= quant(i).min_duration()) return false;  // cannot happen on a finite cut
      --d_[s];
      log_.emplace_back(i, d_[s]);
    } else if (!a_in && b_in && d_[s] < quant(i).max_duration()) {
      ++d_[s];
      lengthened_.push_back(i);
      log_.emplace_back(i, d_[s]);
    }
  }
  if (log_.size() == log_begin) return false;

  // Lengthening a backward arc can stretch a path that had exactly one unit of
  // float; undo such lengthenings until the iteration is one unit shorter.
  while (compute_times(T - 1) > T - 1) {
    bool undone = false;
    for (const Index i : lengthened_) {
      const auto s = static_cast<std::size_t>(i);
      if (latest_finish_[s] - earliest_start_[s] - d_[s] < 0 && d_[s] > quant(i).min_duration()) {
        --d_[s];
        log_.emplace_back(i, d_[s]);
        undone = true;
      }
    }
    if (!undone) return false;
  }
  step_units_.push_back(compute_times(-1));
  step_end_.push_back(log_.size());
  return true;
}

void PhillipsDessouky::run() {
  compute_times(-1);
  const std::int64_t expected = max_units_ - min_units_;
  const auto started = std::chrono::steady_clock::now();
  auto last_report = started;
  if (progress_ && !progress_(0, expected)) throw SolveCancelled();
  while (step()) {
    const auto now = std::chrono::steady_clock::now();
    if (progress_ && now - last_report > std::chrono::milliseconds(100)) {
      last_report = now;
      if (!progress_(steps(), expected)) throw SolveCancelled();
    }
  }
  if (progress_ && !progress_(steps(), expected)) throw SolveCancelled();
}

constexpr std::int64_t kMaxStepPlans = 1024;
constexpr std::size_t kMaxPlans = 1024;  // plans on a frontier, about

struct Candidate {
  double time_s, energy_j, energy_before_j;
};

// Walks the candidate plans in a fixed order, rebuilding each from the step
// log, so that a second walk can regenerate the plans the first one kept
// without storing every plan:
//   c = 0   every computation at its fastest option;
//   then    the plans after 0, s, 2s, ... and all min-cut steps (s = 1 unless
//           there were more than kMaxStepPlans steps), each with its model
//           time as deadline;
//   then    the last step's plan tightened towards the fastest measured time,
//           one unit at a time.
// Every candidate is improved by slack reclamation up to its deadline.
class CandidateWalk {
 public:
  CandidateWalk(const PhillipsDessouky& solver, Evaluator& evaluator, double unit_time_s,
                double fastest_time_s, bool tightening_chain)
      : solver_(solver),
        evaluator_(evaluator),
        unit_(unit_time_s),
        fastest_(fastest_time_s),
        n_(static_cast<std::size_t>(solver.n())),
        durations_(n_),
        chain_(n_),
        choice_(n_) {
    // Step plans: all of them, or evenly spaced ones (and the last) when the
    // solver took more than kMaxStepPlans steps.
    const std::int64_t steps = solver.steps();
    const std::int64_t stride = std::max<std::int64_t>(1, (steps + kMaxStepPlans) / kMaxStepPlans);
    for (std::int64_t k = 0; k < steps; k += stride) sampled_.push_back(k);
    sampled_.push_back(steps);
    // Deadlines for the tightening chain: below the last model time, down to
    // the fastest measured time.
    if (!tightening_chain) return;
    const double last = static_cast<double>(solver.units_after(steps - 1)) * unit_;
    for (double d = last - unit_; d > fastest_; d -= unit_) chain_deadlines_.push_back(d);
    chain_deadlines_.push_back(fastest_);
  }

  std::size_t size() const { return 1 + sampled_.size() + chain_deadlines_.size(); }

  // Rebuilds candidate c into choice() (c must grow by one from 0 each walk)
  // and returns its deadline; `before` gets its replay before reclamation.
  double build(std::size_t c, Evaluation& before) {
    double deadline;
    if (c == 0) {
      std::fill(choice_.begin(), choice_.end(), OptionIndex{0});
      deadline = fastest_;
    } else if (c <= sampled_.size()) {
      const std::int64_t target = sampled_[c - 1];  // steps applied to this plan
      if (c == 1) {
        solver_.initial_durations(durations_);
        applied_ = 0;
      }
      for (; applied_ < target; ++applied_) solver_.apply_step(applied_, durations_);
      for (std::size_t i = 0; i < n_; ++i)
        choice_[i] = solver_.option_for(static_cast<Index>(i), durations_[i]);
      if (c == sampled_.size()) chain_ = choice_;
      deadline = static_cast<double>(solver_.units_after(target - 1)) * unit_;
    } else {
      deadline = chain_deadlines_[c - sampled_.size() - 1];
      evaluator_.tighten(chain_.data(), deadline);
      choice_ = chain_;
    }
    before = evaluator_.evaluate(choice_.data());
    return deadline;
  }
  OptionIndex* choice() { return choice_.data(); }

 private:
  const PhillipsDessouky& solver_;
  Evaluator& evaluator_;
  double unit_, fastest_;
  std::size_t n_;
  std::vector<Units> durations_;
  std::vector<OptionIndex> chain_, choice_;
  std::vector<std::int64_t> sampled_;
  std::int64_t applied_ = 0;
  std::vector<double> chain_deadlines_;
};


// The min-cut steps give plans at the model's times only. Densify adds a
// plan for every deadline on a grid over the frontier's time range (one unit
// apart, at most kMaxGrid deadlines), found by local search from frontier
// plans near the deadline. The effort is bounded in work units (see
// Evaluator::work), spread evenly over the deadlines, so large pipelines stay
// fast and the plans do not depend on the machine.
constexpr std::size_t kMaxGrid = 512;
constexpr double kMaxUnitDivisor = 16.0;
constexpr double kQuantumWork = 1e6;   // min-cut steps times (nodes + edges)
// Evaluator work units for all deadlines together: this many per DAG node
// and edge, within bounds (tiny pipelines get a floor: their search is cheap
// and pays off most).
constexpr double kDensifyWorkPerElement = 5e3;
constexpr double kDensifyWorkFloor = 1e7;
constexpr double kDensifyWorkCap = 1e8;
constexpr int kDensifyRounds = 2;
constexpr std::size_t kStarts = 8;
constexpr std::size_t kAllFastest = SIZE_MAX;  // a start that is not a frontier row

void densify(FrontierResult& r, Evaluator& evaluator, double unit_time_s, double blocking_w,
             std::size_t elements) {
  const std::size_t n = static_cast<std::size_t>(r.num_computations);
  const std::size_t plans = r.iteration_time_s.size();
  const double first = r.iteration_time_s.front(), last = r.iteration_time_s.back();
  std::vector<double> deadlines(r.iteration_time_s);
  const double spacing = std::max(unit_time_s, (last - first) / static_cast<double>(kMaxGrid));
  for (double d = first + spacing; d < last; d += spacing) deadlines.push_back(d);
  std::sort(deadlines.begin(), deadlines.end());

  const double work = std::clamp(kDensifyWorkPerElement * static_cast<double>(elements),
                                 kDensifyWorkFloor, kDensifyWorkCap);
  const std::int64_t budget_end = evaluator.work() + static_cast<std::int64_t>(work);
  std::vector<OptionIndex> a(n), b(n);
  std::vector<OptionIndex> rows;
  std::vector<Evaluation> found;
  std::vector<double> found_before;
  for (std::size_t g = 0; g < deadlines.size(); ++g) {
    const double deadline = deadlines[g];
    const std::int64_t share =
        std::max<std::int64_t>(0, budget_end - evaluator.work()) /
        static_cast<std::int64_t>(deadlines.size() - g);
    const std::int64_t share_end = evaluator.work() + share;
    // Frontier plan k is the slowest one meeting the deadline.
    const std::size_t k = static_cast<std::size_t>(
        std::upper_bound(r.iteration_time_s.begin(), r.iteration_time_s.begin() + static_cast<std::ptrdiff_t>(plans), deadline) -
        r.iteration_time_s.begin()) - 1;
    // Starts, most promising first: plan k and the next slower one tightened
    // to the deadline (always), then while half the share lasts, more
    // frontier plans on both sides (faster ones reclaimed up to the deadline,
    // slower ones tightened to it), the fastest one, and every computation at
    // its fastest option.
    // The best start gets the local search with what is left of the share.
    Evaluation best{kInfinity, kInfinity};
    auto consider = [&](std::size_t from, bool tighten) {
      if (from == kAllFastest)
        std::fill(b.begin(), b.end(), OptionIndex{0});
      else
        std::copy_n(r.choices.begin() + static_cast<std::ptrdiff_t>(from * n), n, b.begin());
      if (tighten && !evaluator.tighten(b.data(), deadline)) return;
      const Evaluation e = evaluator.reclaim_both(b.data(), deadline);
      if (e.iteration_time_s <= deadline &&
          (best.iteration_time_s == kInfinity ||
           evaluator.energy_at(e, deadline) < evaluator.energy_at(best, deadline))) {
        best = e;
        a.swap(b);
      }
    };
    consider(k, false);
    if (k + 1 < plans) consider(k + 1, true);
    const std::int64_t starts_end = evaluator.work() + (share_end - evaluator.work()) / 2;
    for (std::size_t step = 1; step < kStarts && evaluator.work() < starts_end; ++step) {
      if (step <= k) consider(k - step, false);
      if (k + 1 + step < plans) consider(k + 1 + step, true);
    }
    if (k >= kStarts && evaluator.work() < starts_end) consider(0, false);
    if (evaluator.work() < starts_end) consider(kAllFastest, false);
    best = evaluator.improve(a.data(), deadline, std::max<std::int64_t>(0, share_end - evaluator.work()));
    rows.insert(rows.end(), a.begin(), a.end());
    found.push_back(best);
    found_before.push_back(r.energy_before_reclaim_j[k] +
                           blocking_w * (best.iteration_time_s - r.iteration_time_s[k]));
  }
  for (std::size_t f = 0; f < found.size(); ++f) {
    r.iteration_time_s.push_back(found[f].iteration_time_s);
    r.energy_j.push_back(found[f].energy_j);
    r.energy_before_reclaim_j.push_back(found_before[f]);
  }
  r.choices.insert(r.choices.end(), rows.begin(), rows.end());
}

// Plans worth keeping, fastest first. A plan is dominated by one that is no
// slower and costs no more energy over an iteration of the slower one's
// length: a pipeline often waits for a straggler, and while it waits its GPUs
// draw blocking power, so energies are compared at a common iteration time.
// Equivalently, keep the plans whose effective energy E - G*P_block*T falls
// strictly as T grows. `blocking_w` is G * P_block (watts).
std::vector<std::size_t> pareto_order(const std::vector<double>& time_s,
                                      const std::vector<double>& energy_j, double blocking_w) {
  std::vector<std::size_t> order(time_s.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  auto effective = [&](std::size_t k) { return energy_j[k] - blocking_w * time_s[k]; };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (time_s[a] != time_s[b]) return time_s[a] < time_s[b];
    return effective(a) < effective(b);
  });
  std::vector<std::size_t> kept;
  double best = kInfinity, last_time = -kInfinity;
  for (const std::size_t k : order) {
    if (effective(k) < best && time_s[k] > last_time) {
      kept.push_back(k);
      best = effective(k);
      last_time = time_s[k];
    }
  }
  return kept;
}

// Improvement can reorder times or make a plan dominated: keep the Pareto
// rows, and of those at most about kMaxPlans, evenly spread in time (a plan
// is kept when it is at least range/kMaxPlans slower than the last kept one).
void drop_dominated(FrontierResult& r, double blocking_w) {
  const std::size_t n = static_cast<std::size_t>(r.num_computations);
  FrontierResult kept;
  kept.num_computations = r.num_computations;
  std::vector<std::size_t> order = pareto_order(r.iteration_time_s, r.energy_j, blocking_w);
  if (order.size() > kMaxPlans) {
    const double spacing = (r.iteration_time_s[order.back()] - r.iteration_time_s[order.front()]) /
                           static_cast<double>(kMaxPlans);
    std::vector<std::size_t> spread;
    for (const std::size_t k : order)
      if (spread.empty() || r.iteration_time_s[k] >= r.iteration_time_s[spread.back()] + spacing ||
          k == order.back())
        spread.push_back(k);
    order.swap(spread);
  }
  for (const std::size_t k : order) {
    kept.iteration_time_s.push_back(r.iteration_time_s[k]);
    kept.energy_j.push_back(r.energy_j[k]);
    kept.energy_before_reclaim_j.push_back(r.energy_before_reclaim_j[k]);
    kept.choices.insert(kept.choices.end(), r.choices.begin() + static_cast<std::ptrdiff_t>(k * n),
                        r.choices.begin() + static_cast<std::ptrdiff_t>((k + 1) * n));
  }
  r.choices.swap(kept.choices);
  r.iteration_time_s.swap(kept.iteration_time_s);
  r.energy_j.swap(kept.energy_j);
  r.energy_before_reclaim_j.swap(kept.energy_before_reclaim_j);
}

}  // namespace

FrontierResult solve_frontier(const Pipeline& pipeline, const Dag& dag, const OptionTable& table,
                              const SolverOptions& options) {
  if (!(options.unit_time_s > 0) || !std::isfinite(options.unit_time_s))
    throw std::invalid_argument("unit_time must be a positive number of seconds");
  if (!(options.blocking_power_w >= 0) || !std::isfinite(options.blocking_power_w))
    throw std::invalid_argument("blocking_power must be a finite number of watts >= 0");
  if (table.num_stages() != pipeline.num_stages())
    throw std::invalid_argument("the profile has " + std::to_string(table.num_stages()) +
                                " stages but the pipeline needs " +
                                std::to_string(pipeline.num_stages()));

  // A finer quantum makes the convex model closer to the measured options.
  // When refining, small pipelines get one: the unit is divided by up to
  // kMaxUnitDivisor while the expected work (steps times DAG size) stays
  // within kQuantumWork, so large pipelines keep the unit they were given.
  SolverOptions effective = options;
  if (options.refine) {
    const PhillipsDessouky probe(pipeline, dag, table, options);
    const double work = static_cast<double>(probe.max_units() - probe.min_units() + 1) *
                        static_cast<double>(dag.num_nodes() + dag.num_edges());
    const double divisor = std::floor(std::min(kMaxUnitDivisor, kQuantumWork / work));
    if (divisor > 1) effective.unit_time_s = options.unit_time_s / divisor;
  }
  PhillipsDessouky solver(pipeline, dag, table, effective);
  solver.run();

  const auto nn = static_cast<std::size_t>(pipeline.size());
  Evaluator evaluator(pipeline, dag, table, options.blocking_power_w);
  FrontierResult result;
  result.num_computations = pipeline.size();
  result.steps = solver.steps();
  result.unit_time_s = effective.unit_time_s;
  result.min_time_units = solver.min_units();
  result.max_time_units = solver.max_units();
  {
    std::vector<OptionIndex> fastest(nn, OptionIndex{0});
    result.baseline = evaluator.evaluate(fastest.data());
  }

  CandidateWalk walk(solver, evaluator, effective.unit_time_s, result.baseline.iteration_time_s,
                     options.refine);
  const std::size_t num_candidates = walk.size();
  const double blocking_w = options.blocking_power_w * static_cast<double>(pipeline.num_gpus());
  std::vector<Candidate> candidates(num_candidates);
  for (std::size_t c = 0; c < num_candidates; ++c) {
    Evaluation before{};
    const double deadline = walk.build(c, before);
    const Evaluation after = options.refine ? evaluator.reclaim(walk.choice(), deadline) : before;
    // The unrefined plan's energy over an iteration as long as the refined one.
    const double before_j = before.energy_j + blocking_w * (after.iteration_time_s - before.iteration_time_s);
    candidates[c] = {after.iteration_time_s, after.energy_j, before_j};
  }

  // Keep the Pareto-optimal candidates, fastest first.
  std::vector<double> times(num_candidates), energies(num_candidates);
  for (std::size_t c = 0; c < num_candidates; ++c) {
    times[c] = candidates[c].time_s;
    energies[c] = candidates[c].energy_j;
  }
  std::vector<std::size_t> rank(num_candidates, SIZE_MAX);
  std::size_t kept = 0;
  for (const std::size_t c : pareto_order(times, energies, blocking_w)) {
    rank[c] = kept++;
    result.iteration_time_s.push_back(candidates[c].time_s);
    result.energy_j.push_back(candidates[c].energy_j);
    result.energy_before_reclaim_j.push_back(candidates[c].energy_before_j);
  }

  // Regenerate the kept plans (every step is deterministic) into their rows.
  result.choices.resize(kept * nn);
  for (std::size_t c = 0; c < num_candidates; ++c) {
    Evaluation before{};
    const double deadline = walk.build(c, before);
    if (rank[c] == SIZE_MAX) continue;
    if (options.refine) evaluator.reclaim(walk.choice(), deadline);
    std::copy(walk.choice(), walk.choice() + nn,
              result.choices.begin() + static_cast<std::ptrdiff_t>(rank[c] * nn));
  }
  if (options.refine) {
    // Two rounds: the second starts from the first one's plans, so a good
    // structure found at one deadline spreads to its neighbours.
    for (int round = 0; round < kDensifyRounds; ++round) {
      densify(result, evaluator, effective.unit_time_s, blocking_w,
              static_cast<std::size_t>(dag.num_nodes() + dag.num_edges()));
      drop_dominated(result, blocking_w);
    }
  }
  return result;
}

}  // namespace perseus
