// The selection and local-search parts of cpp/refinement.hpp: frontier_of
// (which plans a frontier keeps: ties, equal times, the blocking-power rule,
// the resolution, against a pairwise-dominance oracle) and search_deadlines
// (which deadlines it visits, its budget and shares, and that what it records
// is never worse at a frontier plan's time than that plan), and the hull
// pass (which deadlines hull_gap_deadlines picks, against a brute-force
// hull, and what search_hull_gaps records). Public interface only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "dag.hpp"
#include "evaluate.hpp"
#include "plan_improver.hpp"
#include "plan_log.hpp"
#include "refinement.hpp"
#include "test_support.hpp"

namespace perseus {
namespace {

using Indices = std::vector<std::size_t>;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(FrontierOf, EmptyInputKeepsNothing) { EXPECT_TRUE(frontier_of({}, {}, 10.0, 0.0).empty()); }

TEST(FrontierOf, KeepsFallingEnergyFastestFirstWhateverTheInputOrder) {
  // Given slowest first; plan 1 (3 s, 9 J) is no cheaper than the faster plan 2.
  const std::vector<double> time_s{4.0, 3.0, 2.0, 1.0};
  const std::vector<double> energy_j{5.0, 9.0, 8.0, 10.0};
  EXPECT_EQ(frontier_of(time_s, energy_j, 0.0, 0.0), (Indices{3, 2, 0}));
}

TEST(FrontierOf, EqualTimesKeepTheCheaperAndEqualPlansTheFirstListed) {
  const std::vector<double> time_s{2.0, 1.0, 2.0, 1.0};
  const std::vector<double> energy_j{6.0, 9.0, 5.0, 9.0};
  // At 1 s two identical plans: the first listed (1). At 2 s the cheaper (2).
  EXPECT_EQ(frontier_of(time_s, energy_j, 0.0, 0.0), (Indices{1, 2}));
}

TEST(FrontierOf, EqualEnergyAtALongerTimeIsDominated) {
  // A slower plan must be strictly cheaper: equal energy takes longer for nothing.
  EXPECT_EQ(frontier_of({1.0, 2.0}, {5.0, 5.0}, 0.0, 0.0), (Indices{0}));
}

TEST(FrontierOf, BlockingPowerDecidesWhatASlowerPlanSaves) {
  // The slower plan uses 1 J more but 1 s longer. Without blocking power it
  // is dominated. With 3 W of blocking power the faster plan idles 1 s at
  // 3 W over the slower plan's length (effective 10 - 3 = 7 J against
  // 11 - 6 = 5 J), so the slower one saves 2 J and is kept.
  const std::vector<double> time_s{1.0, 2.0};
  const std::vector<double> energy_j{10.0, 11.0};
  EXPECT_EQ(frontier_of(time_s, energy_j, 0.0, 0.0), (Indices{0}));
  EXPECT_EQ(frontier_of(time_s, energy_j, 3.0, 0.0), (Indices{0, 1}));
  // At exactly 1 W the effective energies tie (9 J): dominated again.
  EXPECT_EQ(frontier_of(time_s, energy_j, 1.0, 0.0), (Indices{0}));
}

TEST(FrontierOf, ResolutionDropsSavingsBelowIt) {
  const std::vector<double> time_s{1.0, 2.0, 3.0};
  const std::vector<double> energy_j{10.0, 9.5, 8.0};
  EXPECT_EQ(frontier_of(time_s, energy_j, 0.0, 0.0), (Indices{0, 1, 2}));
  // 0.5 J is not more than 0.5 J; the next plan is compared with the last kept.
  EXPECT_EQ(frontier_of(time_s, energy_j, 0.0, 0.5), (Indices{0, 2}));
  EXPECT_EQ(frontier_of(time_s, energy_j, 0.0, 2.0), (Indices{0}));
}

TEST(FrontierOf, NonFiniteRowsAreSkipped) {
  const std::vector<double> time_s{kNaN, 1.0, 2.0, kInf, 3.0};
  const std::vector<double> energy_j{1.0, 10.0, kNaN, 1.0, 8.0};
  EXPECT_EQ(frontier_of(time_s, energy_j, 0.0, 0.0), (Indices{1, 4}));
}

TEST(FrontierOf, MatchesPairwiseDominanceOnRandomSets) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> time(1.0, 10.0), energy(100.0, 200.0);
  for (int trial = 0; trial < 50; ++trial) {
    const std::size_t count = 1 + rng() % 60;
    const double blocking_w = trial % 2 == 0 ? 0.0 : 7.0;
    std::vector<double> time_s(count), energy_j(count);
    for (std::size_t k = 0; k < count; ++k) {
      // Some repeated times, so that equal-time ties are exercised.
      time_s[k] = rng() % 4 == 0 ? std::floor(time(rng)) : time(rng);
      energy_j[k] = energy(rng);
    }
    // Kept exactly when no other plan is as fast and as cheap (effective),
    // ties going to the one listed first.
    Indices expected;
    for (std::size_t k = 0; k < count; ++k) {
      const double ek = energy_j[k] - blocking_w * time_s[k];
      bool dominated = false;
      for (std::size_t j = 0; j < count && !dominated; ++j) {
        const double ej = energy_j[j] - blocking_w * time_s[j];
        if (j == k) continue;
        const bool no_worse = time_s[j] <= time_s[k] && ej <= ek;
        const bool better = time_s[j] < time_s[k] || ej < ek || j < k;
        dominated = no_worse && better;
      }
      if (!dominated) expected.push_back(k);
    }
    std::sort(expected.begin(), expected.end(),
              [&](std::size_t a, std::size_t b) { return time_s[a] < time_s[b]; });
    EXPECT_EQ(frontier_of(time_s, energy_j, blocking_w, 0.0), expected) << "trial " << trial;
  }
}

// A small 1F1B problem and a frontier of three plans to search from.
struct Search {
  Pipeline pipeline{ScheduleKind::OneFOneB, 2, 1, 4};
  Dag dag{pipeline};
  OptionTable table;
  Evaluator evaluator{pipeline, dag, table};
  std::vector<OptionIndex> rows;  // plans, fastest first
  std::vector<double> time_s, energy_j;

  Search()
      : table([&] {
          std::mt19937 rng(3);
          return test_support::table_from_raw(
              pipeline.num_stages(), test_support::random_sweeps(pipeline.num_stages(), 6, rng), 60.0);
        }()) {
    const Index n = pipeline.size();
    for (const int level : {0, 2, 5}) {  // fastest, middle and slowest options
      for (Index i = 0; i < n; ++i)
        rows.push_back(
            static_cast<OptionIndex>(std::min(level, table.num_options(evaluator.group(i)) - 1)));
      const Evaluation e = evaluator.evaluate(rows.data() + rows.size() - ix(n));
      time_s.push_back(e.iteration_time_s);
      energy_j.push_back(e.energy_j);
    }
  }

  // Runs the search, returning its log and the (done, total) of every tick.
  std::pair<PlanLog, std::vector<std::pair<std::int64_t, std::int64_t>>> run(std::size_t max_grid,
                                                                             std::int64_t max_work,
                                                                             Share share) {
    PlanImprover improver(pipeline, dag, table);
    PlanLog log(pipeline.size());
    std::vector<std::pair<std::int64_t, std::int64_t>> ticks;
    PlanRows plans(pipeline.size());
    for (std::size_t k = 0; k < time_s.size(); ++k) plans.append(rows.data() + k * ix(pipeline.size()));
    search_deadlines(plans, time_s, max_grid, max_work, share, improver, log,
                     [&](std::int64_t done, std::int64_t total) { ticks.emplace_back(done, total); });
    return {std::move(log), ticks};
  }
};

TEST(SearchDeadlines, VisitsEveryPlansTimeAndTheGridBetween) {
  Search s;
  ASSERT_LT(s.time_s[0], s.time_s[1]);
  ASSERT_LT(s.time_s[1], s.time_s[2]);
  const std::int64_t ample = std::int64_t{1} << 40;
  // One tick per deadline, before it, in work units of the budget: here the
  // budget is ample, so how far the deadlines are.
  const auto share_of = [](const std::pair<std::int64_t, std::int64_t>& tick) {
    return static_cast<double>(tick.first) / static_cast<double>(tick.second);
  };
  // No grid: the three plans' own times.
  auto [plain_log, plain_ticks] = s.run(0, ample, Share{});
  ASSERT_EQ(plain_ticks.size(), 3u);
  for (std::size_t d = 0; d < plain_ticks.size(); ++d) {
    EXPECT_EQ(plain_ticks[d].second, ample);
    EXPECT_NEAR(share_of(plain_ticks[d]), static_cast<double>(d) / 3, 1e-9);
  }
  // A grid of 4 adds the 3 points strictly inside the range.
  auto [grid_log, grid_ticks] = s.run(4, ample, Share{});
  ASSERT_EQ(grid_ticks.size(), 6u);
  EXPECT_NEAR(share_of(grid_ticks.back()), 5.0 / 6, 1e-9);
  EXPECT_GT(grid_log.size(), plain_log.size());
}

TEST(SearchDeadlines, TicksCountTheBudgetWhenItRunsOutFirst) {
  Search s;
  bool work_led = false;  // some tick counted work beyond its deadlines' share
  for (const std::int64_t budget : {1000, 3000, 10000, 30000, 100000, 300000}) {
    auto [log, ticks] = s.run(8, budget, Share{});
    ASSERT_FALSE(ticks.empty());
    for (std::size_t t = 0; t < ticks.size(); ++t) {
      const auto [done, total] = ticks[t];
      EXPECT_EQ(total, budget);
      EXPECT_GE(done, 0);
      EXPECT_LT(done, total);
      if (t > 0) {
        EXPECT_GE(done, ticks[t - 1].first);
      }
      // 10 deadlines (3 plan times, 7 grid points): at least the share of them done.
      const auto by_deadlines =
          static_cast<std::int64_t>(static_cast<double>(t) / 10 * static_cast<double>(budget));
      EXPECT_GE(done, by_deadlines);
      work_led |= done > by_deadlines;
    }
  }
  EXPECT_TRUE(work_led);
}

TEST(SearchDeadlines, RecordsNoWorsePlanAtEveryFrontierTime) {
  Search s;
  auto [log, ticks] = s.run(8, std::int64_t{1} << 40, Share{});
  ASSERT_GT(log.size(), 0u);
  const double blocking_w = s.evaluator.pipeline_blocking_w();
  for (std::size_t k = 0; k < s.time_s.size(); ++k) {
    const double deadline = s.time_s[k];
    double best = kInf;
    for (std::size_t r = 0; r < log.size(); ++r)
      if (log.time_s(r) <= deadline * (1 + 1e-12))
        best = std::min(best, log.energy_j(r) + blocking_w * (deadline - log.time_s(r)));
    EXPECT_LE(best, s.energy_j[k] * (1 + 1e-12)) << "frontier plan " << k;
  }
  // What the log says of each plan is the plan's replay.
  Indices all(log.size());
  for (std::size_t r = 0; r < all.size(); ++r) all[r] = r;
  log.rebuild(all, [&](std::size_t r, const OptionIndex* plan) {
    const Evaluation e = s.evaluator.evaluate(plan);
    // The improver keeps running sums: equal to a replay up to rounding.
    EXPECT_NEAR(log.time_s(r), e.iteration_time_s, 1e-12 * e.iteration_time_s) << "record " << r;
    EXPECT_NEAR(log.energy_j(r), e.energy_j, 1e-12 * e.energy_j) << "record " << r;
  });
}

TEST(SearchDeadlines, SharesSplitTheDeadlinesAndTheResultIsRepeatable) {
  Search s;
  const std::int64_t ample = std::int64_t{1} << 40;
  auto [whole, whole_ticks] = s.run(8, ample, Share{});
  auto [even, even_ticks] = s.run(8, ample, Share{0, 2});
  auto [odd, odd_ticks] = s.run(8, ample, Share{1, 2});
  // 3 plan times and 7 grid points, no two equal: 10 deadlines, 5 per share.
  ASSERT_EQ(whole_ticks.size(), 10u);
  EXPECT_EQ(even_ticks.size(), 5u);
  EXPECT_EQ(odd_ticks.size(), 5u);
  EXPECT_NEAR(
      static_cast<double>(even_ticks.back().first) / static_cast<double>(even_ticks.back().second),
      4.0 / 5, 1e-9);
  auto [again, again_ticks] = s.run(8, ample, Share{});
  ASSERT_EQ(again.size(), whole.size());
  for (std::size_t r = 0; r < whole.size(); ++r) {
    EXPECT_EQ(again.time_s(r), whole.time_s(r));
    EXPECT_EQ(again.energy_j(r), whole.energy_j(r));
  }
}

TEST(SearchDeadlines, StopsWhenTheBudgetIsSpentOrAbsent) {
  Search s;
  auto [none, none_ticks] = s.run(8, 0, Share{});
  EXPECT_EQ(none.size(), 0u);
  EXPECT_TRUE(none_ticks.empty());
  // One work unit: the first deadline spends it, the second is never started.
  auto [one, one_ticks] = s.run(8, 1, Share{});
  EXPECT_EQ(one_ticks.size(), 1u);
  EXPECT_GT(one.size(), 0u);
  PlanImprover improver(s.pipeline, s.dag, s.table);
  PlanLog empty_log(s.pipeline.size());
  search_deadlines(PlanRows(s.pipeline.size()), {}, 8, 1000, Share{}, improver, empty_log,
                   [](std::int64_t, std::int64_t) { ADD_FAILURE() << "no deadline to tick"; });
  EXPECT_EQ(empty_log.size(), 0u);
}

// The all-fastest start slows every computation, which on large pipelines
// costs many deadlines' shares: with a cost to go by, it runs only while its
// last cost fits the deadline's share, and then records what it cost.
TEST(SearchDeadline, TriesTheAllFastestStartOnlyWhileItsLastCostFitsTheShare) {
  Search s;
  const std::size_t n = ix(s.pipeline.size());
  const std::vector<OptionIndex> fastest(n, 0);
  const auto row_at = [&s, n](std::size_t k) { return s.rows.data() + k * n; };
  const double deadline = 0.5 * (s.time_s[1] + s.time_s[2]);
  const std::int64_t budget = 1000000;
  auto search = [&](std::int64_t* cost) {
    PlanImprover improver(s.pipeline, s.dag, s.table);
    PlanLog log(s.pipeline.size());
    std::vector<OptionIndex> best(n);
    const double best_j = search_deadline(deadline, s.time_s, row_at, fastest.data(),
                                          improver.work() + budget, 1, improver, &log, best, cost);
    return std::make_pair(log.size(), best_j);
  };
  const auto [always, always_j] = search(nullptr);
  std::int64_t cost = 0;
  const auto [first, first_j] = search(&cost);
  EXPECT_EQ(first, always);  // no cost known yet: tried
  EXPECT_EQ(first_j, always_j);
  EXPECT_GT(cost, 0);
  std::int64_t too_dear = budget + 1;
  const auto [skipped, skipped_j] = search(&too_dear);
  EXPECT_EQ(skipped + 1, always);  // one start fewer recorded
  EXPECT_EQ(too_dear, budget + 1);
  EXPECT_GE(skipped_j, always_j);
}

// Plans above the lower convex hull of (time, energy): the hull runs through
// (1, 10), (3, 6) and (6, 3).
struct Bent {
  std::vector<double> time_s{1.0, 2.0, 3.0, 4.0, 5.0, 5.5, 6.0};
  std::vector<double> energy_j{10.0, 8.5, 6.0, 5.2, 4.0004, 3.6, 3.0};
};

TEST(HullGapDeadlines, PicksThePlansFurthestAboveTheHullInTimeOrder) {
  const Bent b;
  // Above the hull: 2 s by 0.5 J (5.9 %), 4 s by 0.2 J (3.8 %), 5.5 s by
  // 0.1 J (2.8 %); 5 s by 0.0004 J, under kHullGapShare of its energy.
  EXPECT_EQ(hull_gap_deadlines(b.time_s, b.energy_j, 0.0, 10), (std::vector<double>{2.0, 4.0, 5.5}));
  // At most two: the two largest shares.
  EXPECT_EQ(hull_gap_deadlines(b.time_s, b.energy_j, 0.0, 2), (std::vector<double>{2.0, 4.0}));
  // No two within 2.5 s: 4 s is too near the larger gap at 2 s.
  EXPECT_EQ(hull_gap_deadlines(b.time_s, b.energy_j, 2.5, 10), (std::vector<double>{2.0, 5.5}));
  EXPECT_TRUE(hull_gap_deadlines(b.time_s, b.energy_j, 0.0, 0).empty());
}

TEST(HullGapDeadlines, AConvexFrontierHasNothingToSearch) {
  EXPECT_TRUE(hull_gap_deadlines({}, {}, 0.0, 10).empty());
  EXPECT_TRUE(hull_gap_deadlines({1.0, 2.0}, {5.0, 4.0}, 0.0, 10).empty());
  // Convex, with a point on a straight stretch (3 s): none above the hull.
  EXPECT_TRUE(
      hull_gap_deadlines({1.0, 2.0, 3.0, 4.0, 5.0}, {10.0, 7.0, 6.0, 5.0, 4.5}, 0.0, 10).empty());
}

TEST(HullGapDeadlines, MatchesABruteForceHullOnRandomFrontiers) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> step(0.01, 1.0), energy(1.0, 2.0);
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t count = 2 + static_cast<std::size_t>(rng() % 12);
    std::vector<double> time_s, energy_j;
    double t = 0.0;
    for (std::size_t k = 0; k < count; ++k) {
      t += step(rng);
      time_s.push_back(t);
      energy_j.push_back(energy(rng));
    }
    // The lower hull at t_k: the lowest chord over t_k between two other plans.
    std::vector<double> expected;
    bool near_threshold = false;
    for (std::size_t k = 0; k < count; ++k) {
      double lowest = energy_j[k];
      for (std::size_t a = 0; a < k; ++a)
        for (std::size_t c = k + 1; c < count; ++c)
          lowest =
              std::min(lowest, energy_j[a] + (energy_j[c] - energy_j[a]) * (time_s[k] - time_s[a]) /
                                                 (time_s[c] - time_s[a]));
      const double share = (energy_j[k] - lowest) / energy_j[k];
      near_threshold |= std::abs(share - local_search_moves::kHullGapShare) < 1e-9;
      if (share > local_search_moves::kHullGapShare) expected.push_back(time_s[k]);
    }
    if (near_threshold) continue;
    EXPECT_EQ(hull_gap_deadlines(time_s, energy_j, 0.0, count), expected) << "trial " << trial;
  }
}

TEST(SearchHullGaps, RecordsNoWorsePlanAtEachDeadlineAndSharesSplitThem) {
  Search s;
  PlanRows plans(s.pipeline.size());
  for (std::size_t k = 0; k < s.time_s.size(); ++k)
    plans.append(s.rows.data() + k * ix(s.pipeline.size()));
  auto run = [&](Share share, std::int64_t work_each, std::vector<std::int64_t>& ticked) {
    PlanImprover improver(s.pipeline, s.dag, s.table);
    PlanLog log(s.pipeline.size());
    search_hull_gaps(plans, s.time_s, s.time_s, work_each, share, improver, log,
                     [&](std::int64_t done, std::int64_t total) {
                       EXPECT_EQ(total, 3);
                       ticked.push_back(done);
                     });
    return log;
  };
  std::vector<std::int64_t> whole_ticks, even_ticks, odd_ticks, none_ticks;
  const PlanLog whole = run(Share{}, 1000000, whole_ticks);
  EXPECT_EQ(whole_ticks, (std::vector<std::int64_t>{0, 1, 2}));
  const double blocking_w = s.evaluator.pipeline_blocking_w();
  for (std::size_t k = 0; k < s.time_s.size(); ++k) {
    double best = kInf;
    for (std::size_t r = 0; r < whole.size(); ++r)
      if (whole.time_s(r) <= s.time_s[k] * (1 + 1e-12))
        best = std::min(best, whole.energy_j(r) + blocking_w * (s.time_s[k] - whole.time_s(r)));
    EXPECT_LE(best, s.energy_j[k] * (1 + 1e-12)) << "deadline " << k;
  }
  const PlanLog even = run(Share{0, 2}, 1000000, even_ticks);
  const PlanLog odd = run(Share{1, 2}, 1000000, odd_ticks);
  EXPECT_EQ(even_ticks, (std::vector<std::int64_t>{0, 2}));
  EXPECT_EQ(odd_ticks, (std::vector<std::int64_t>{1}));
  EXPECT_GT(even.size(), 0u);
  EXPECT_GT(odd.size(), 0u);
  EXPECT_EQ(run(Share{}, 0, none_ticks).size(), 0u);  // no budget: nothing searched
  EXPECT_TRUE(none_ticks.empty());
}

}  // namespace
}  // namespace perseus
