// Compact plan storage (cpp/plan_log.hpp): PlanRows gives back every plan
// exactly as appended, whether stored as
// changes or whole (a plan that changes most computations), and holds a run of plans that each change a
// few computations in far less than their rows; PlanLog rebuilds the plans
// asked for.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "plan_log.hpp"

namespace perseus {
namespace {

// Plans of n computations: mostly a few changes from the one before, every
// 7th one random throughout (stored whole), and one equal to the one before.
std::vector<std::vector<OptionIndex>> sample_plans(std::size_t n, std::size_t count) {
  std::mt19937 random(7);
  std::uniform_int_distribution<std::size_t> at(0, n - 1);
  std::uniform_int_distribution<int> option(0, 79);
  std::vector<std::vector<OptionIndex>> plans;
  std::vector<OptionIndex> plan(n, 0);
  for (std::size_t k = 0; k < count; ++k) {
    if (k % 7 == 3) {
      for (OptionIndex& o : plan) o = static_cast<OptionIndex>(option(random));
    } else if (k != 5) {
      for (int c = 0; c < 3; ++c) plan[at(random)] = static_cast<OptionIndex>(option(random));
    }
    plans.push_back(plan);
  }
  return plans;
}

TEST(PlanRows, GivesBackEveryPlanAsAppended) {
  const std::size_t n = 500;
  const auto plans = sample_plans(n, 60);
  PlanRows rows(static_cast<Index>(n));
  for (const auto& plan : plans) rows.append(plan.data());
  ASSERT_EQ(rows.size(), plans.size());
  EXPECT_EQ(rows.num_computations(), static_cast<Index>(n));
  std::size_t visited = 0;
  rows.for_each([&](std::size_t k, const OptionIndex* row) {
    ASSERT_EQ(k, visited++);
    EXPECT_EQ(std::vector<OptionIndex>(row, row + n), plans[k]) << "plan " << k;
  });
  EXPECT_EQ(visited, plans.size());
  const std::vector<OptionIndex> dense = rows.dense();
  ASSERT_EQ(dense.size(), plans.size() * n);
  for (std::size_t k = 0; k < plans.size(); ++k)
    EXPECT_EQ(std::vector<OptionIndex>(dense.begin() + static_cast<std::ptrdiff_t>(k * n),
                                       dense.begin() + static_cast<std::ptrdiff_t>((k + 1) * n)),
              plans[k]);
}

TEST(PlanRows, HoldsPlansThatChangeLittleInLessThanTheirRowsAndNeverMuchMore) {
  const std::size_t n = 4000, count = 300;
  std::vector<OptionIndex> plan(n, 1);
  PlanRows few(static_cast<Index>(n));
  for (std::size_t k = 0; k < count; ++k) {
    plan[(k * 37) % n] = static_cast<OptionIndex>(k % 50);
    plan[(k * 91) % n] = static_cast<OptionIndex>(k % 30);
    few.append(plan.data());
  }
  const std::size_t rows_bytes = count * n * sizeof(OptionIndex);
  EXPECT_LT(few.retained_bytes(), rows_bytes / 20);
  // Plans unrelated to each other are stored whole: about their rows, never
  // the 3x that changes (an index and an option each) would take.
  PlanRows unrelated(static_cast<Index>(n));
  for (std::size_t k = 0; k < count; ++k) {
    for (std::size_t i = 0; i < n; ++i) plan[i] = static_cast<OptionIndex>((i * 13 + k * 7) % 80);
    unrelated.append(plan.data());
  }
  EXPECT_LT(unrelated.retained_bytes(), 2 * rows_bytes + 64 * 1024);
}

TEST(PlanRows, ShrinkToFitKeepsThePlansAndGivesBackTheSpareCapacity) {
  const std::size_t n = 500;
  const auto plans = sample_plans(n, 60);
  PlanRows rows(static_cast<Index>(n));
  for (const auto& plan : plans) rows.append(plan.data());
  const std::vector<OptionIndex> before = rows.dense();
  const std::size_t held = rows.retained_bytes();
  rows.shrink_to_fit();
  EXPECT_EQ(rows.dense(), before);
  EXPECT_LE(rows.retained_bytes(), held);
}

// A reader gives back any plan in any order (the local search reads the
// plans on both sides of each deadline, so its reads go back and forth),
// and several readers of one store do not disturb one another.
TEST(PlanRows, ReaderGivesBackAnyPlanInAnyOrder) {
  const std::size_t n = 50;
  // 400 plans of 1-3 changes: about 800 changes, so whole rows are stored
  // every kChangesPerWholeRow * n = 200 changes even though no plan is big.
  auto plans = sample_plans(n, 400);
  for (std::size_t k = 0; k < plans.size(); ++k)
    if (k % 7 == 3) plans[k] = plans[k - 1];  // no random rows: only the budget forces whole ones
  PlanRows rows(static_cast<Index>(n));
  for (const auto& plan : plans) rows.append(plan.data());
  std::mt19937 random(11);
  std::uniform_int_distribution<std::size_t> any(0, plans.size() - 1);
  PlanRows::Reader first(rows), second(rows);
  for (int read = 0; read < 2000; ++read) {
    const std::size_t k = read % 3 == 0 ? any(random) : (read * 7) % plans.size();
    const OptionIndex* row = first.row(k);
    const std::size_t other = plans.size() - 1 - k;
    EXPECT_EQ(std::vector<OptionIndex>(second.row(other), second.row(other) + n), plans[other]);
    ASSERT_EQ(std::vector<OptionIndex>(row, row + n), plans[k]) << "plan " << k << " read " << read;
  }
  // The local search's pattern: k, k + 1, k - 1, k + 2, ... for rising k.
  PlanRows::Reader near(rows);
  for (std::size_t k = 8; k + 8 < plans.size(); k += 5)
    for (std::size_t step = 0; step < 8; ++step) {
      const OptionIndex* up = near.row(k + step);
      ASSERT_EQ(std::vector<OptionIndex>(up, up + n), plans[k + step]);
      const OptionIndex* down = near.row(k - step);
      ASSERT_EQ(std::vector<OptionIndex>(down, down + n), plans[k - step]);
    }
  EXPECT_THROW(first.row(plans.size()), std::out_of_range);
  // Backwards from the last plan: every read seeks a whole row first.
  PlanRows::Reader backwards(rows);
  for (std::size_t k = plans.size(); k-- > 0;)
    ASSERT_EQ(std::vector<OptionIndex>(backwards.row(k), backwards.row(k) + n), plans[k]);
}

// Whole rows stored only to bound a reader's replay cost at most
// 1 / kChangesPerWholeRow of what the changes take.
TEST(PlanRows, WholeRowsForReadersCostAFractionOfTheChanges) {
  const std::size_t n = 4000, count = 20000;
  std::vector<OptionIndex> plan(n, 1);
  PlanRows rows(static_cast<Index>(n));
  for (std::size_t k = 0; k < count; ++k) {
    plan[(k * 37) % n] = static_cast<OptionIndex>(k % 50 + 1);
    plan[(k * 91) % n] = static_cast<OptionIndex>(k % 30 + 1);
    rows.append(plan.data());
  }
  rows.shrink_to_fit();
  const std::size_t change_bytes = 2 * count * (sizeof(Index) + sizeof(OptionIndex));
  const std::size_t bookkeeping = count * (sizeof(std::size_t) + 1) + n * sizeof(OptionIndex);
  EXPECT_LE(rows.retained_bytes(),
            change_bytes + change_bytes / PlanRows::kChangesPerWholeRow + bookkeeping);
  // ...and they are there: one per kChangesPerWholeRow rows of changes
  // (2 changes a plan), so the last plan read first replays from one.
  const std::size_t changes_per_whole = PlanRows::kChangesPerWholeRow * n;
  EXPECT_EQ(rows.num_whole(), 1 + (2 * count - 1) / changes_per_whole);
  PlanRows::Reader reader(rows);
  EXPECT_EQ(std::vector<OptionIndex>(reader.row(count - 1), reader.row(count - 1) + n), plan);
}

TEST(PlanRows, EmptyHasNoPlans) {
  const PlanRows rows(3);
  EXPECT_EQ(rows.size(), 0u);
  EXPECT_TRUE(rows.dense().empty());
  rows.for_each([](std::size_t, const OptionIndex*) { FAIL() << "no plan to visit"; });
}

TEST(PlanLog, RebuildsThePlansAskedFor) {
  const std::size_t n = 300;
  const auto plans = sample_plans(n, 40);
  PlanLog log(static_cast<Index>(n));
  for (std::size_t k = 0; k < plans.size(); ++k)
    log.record(plans[k].data(), Evaluation{static_cast<double>(k), 2.0 * static_cast<double>(k)}, 0.0);
  const std::vector<std::size_t> wanted{0, 3, 5, 6, 39};
  std::size_t visited = 0;
  log.rebuild(wanted, [&](std::size_t w, const OptionIndex* row) {
    ASSERT_EQ(w, visited++);
    EXPECT_EQ(std::vector<OptionIndex>(row, row + n), plans[wanted[w]]);
  });
  EXPECT_EQ(visited, wanted.size());
  EXPECT_EQ(log.time_s(39), 39.0);
  EXPECT_EQ(log.energy_j(39), 78.0);
}

}  // namespace
}  // namespace perseus
