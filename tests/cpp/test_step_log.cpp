// The min-cut loop's step log (cpp/step_log.hpp), read while it is written:
// a reader on another thread sees every run exactly as appended, in order,
// including runs larger than a chunk; a reader waiting for a run that never
// comes is released by close(); and the min-cut loop's plans read through
// cursors on other threads during the loop match those read after it.
#include <gtest/gtest.h>

#include <cstdint>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "dag.hpp"
#include "options.hpp"
#include "pacer.hpp"
#include "phillips_dessouky.hpp"
#include "step_log.hpp"
#include "test_support.hpp"

namespace perseus {
namespace {

// Run k: k % 5 + 1 units, and (k * 7) % 300 + 1 pairs (k % 97 == 0: 70,000, more than a chunk).
std::size_t run_size(std::size_t k) { return k % 97 == 0 ? 70000 : (k * 7) % 300 + 1; }
Index entry(std::size_t k, std::size_t j) { return static_cast<Index>((k * 31 + j) % 100003); }

TEST(StepLog, AReaderOnAnotherThreadSeesEveryRunAsWritten) {
  StepLog log;
  constexpr std::size_t kRuns = 3000;
  auto reader = std::async(std::launch::async, [&] {
    std::size_t seen = 0;
    StepLog::Run run;
    while (log.wait(seen, run)) {
      const std::size_t k = seen++;
      if (run.units != static_cast<std::int64_t>(k % 5 + 1) || run.size != run_size(k)) return false;
      for (std::size_t j = 0; j < run.size; ++j)
        if (run.computation[j] != entry(k, j) || run.direction[j] != (j % 2 == 0 ? -1 : 1))
          return false;
    }
    return seen == kRuns;
  });
  std::vector<Index> computation;
  std::vector<std::int8_t> direction;
  for (std::size_t k = 0; k < kRuns; ++k) {
    computation.clear();
    direction.clear();
    for (std::size_t j = 0; j < run_size(k); ++j) {
      computation.push_back(entry(k, j));
      direction.push_back(j % 2 == 0 ? -1 : 1);
    }
    log.append(static_cast<std::int64_t>(k % 5 + 1), computation.data(), direction.data(),
               computation.size());
    if (k % 500 == 0) std::this_thread::yield();
  }
  log.close();
  EXPECT_TRUE(reader.get());
  EXPECT_EQ(log.num_runs(), kRuns);
}

TEST(StepLog, CloseReleasesAWaitingReader) {
  StepLog log;
  const Index one = 3;
  const std::int8_t down = -1;
  log.append(2, &one, &down, 1);  // one run, fewer than a wake-up batch
  auto reader = std::async(std::launch::async, [&] {
    StepLog::Run run;
    const bool first = log.wait(0, run);
    return first && run.units == 2 && !log.wait(1, run);  // waits until close()
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  log.close();
  ASSERT_EQ(reader.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(reader.get());
}

TEST(StepLog, PlansReadDuringTheLoopMatchPlansReadAfterIt) {
  const Pipeline pipeline(ScheduleKind::OneFOneB, 4, 1, 8);
  const Dag dag(pipeline);
  std::mt19937 rng(5);
  const OptionTable table = test_support::table_from_raw(
      pipeline.num_stages(), test_support::random_sweeps(pipeline.num_stages(), 8, rng), 70.0);
  const SolverBudgets budgets;
  PhillipsDessouky steps(pipeline, dag, table, 1e-2, budgets);
  // Reads every plan while the loop runs; returns them all, one after another.
  auto walk = [&steps] {
    std::vector<std::int64_t> durations, all;
    std::vector<Index> changed;
    PhillipsDessouky::Cursor cursor;
    steps.first_plan(durations, cursor);
    all.insert(all.end(), durations.begin(), durations.end());
    while (steps.has_next(cursor)) {
      steps.advance(cursor, durations, changed);
      all.insert(all.end(), durations.begin(), durations.end());
    }
    return all;
  };
  auto during = std::async(std::launch::async, walk);
  SolverOptions options;
  Pacer pacer(options);
  steps.run(pacer);
  const std::vector<std::int64_t> after = walk();
  EXPECT_EQ(during.get(), after);
  EXPECT_GT(steps.num_cuts(), 64);  // more than one wake-up batch of runs
  EXPECT_EQ(after.size(), static_cast<std::size_t>(steps.units_done() + 1) * ix(pipeline.size()));
}

}  // namespace
}  // namespace perseus
