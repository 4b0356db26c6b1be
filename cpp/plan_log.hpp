// Candidate plans of a solve, stored compactly.
//
// A solve produces thousands of candidate plans that differ from one another
// in a few computations. The log keeps each one as the (computation, option)
// pairs where it differs from the plan recorded before it, with its replayed
// time and energy, so memory grows with the changes rather than with
// plans x computations. The plans that make the frontier are rebuilt by one
// replay of the log. Cost: O(n) per record (one comparison), O(log size) to
// rebuild any subset.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "evaluate.hpp"
#include "index.hpp"
#include "options.hpp"

namespace perseus {

class PlanLog {
 public:
  explicit PlanLog(Index num_computations);

  // Appends a plan with its replayed evaluation and the energy of the plan it
  // was improved from, over an iteration as long as this one (J).
  void record(const OptionIndex* choice, Evaluation evaluation, double energy_before_j);

  std::size_t size() const { return time_s_.size(); }
  double time_s(std::size_t k) const { return time_s_[k]; }
  double energy_j(std::size_t k) const { return energy_j_[k]; }
  double energy_before_j(std::size_t k) const { return before_j_[k]; }

  // Rebuilds the plans `wanted` (strictly increasing indices) in order, calling
  // visit(position in wanted, choice) for each.
  template <typename Visit>
  void rebuild(const std::vector<std::size_t>& wanted, Visit visit) const {
    std::vector<OptionIndex> plan(ix(num_computations_), 0);
    std::size_t next = 0;
    for (std::size_t k = 0; k < size() && next < wanted.size(); ++k) {
      for (std::size_t c = k == 0 ? 0 : end_[k - 1]; c < end_[k]; ++c)
        plan[ix(changed_[c])] = option_[c];
      if (wanted[next] == k) visit(next++, plan.data());
    }
  }

 private:
  Index num_computations_;
  std::vector<OptionIndex> last_;  // the plan recorded last
  std::vector<Index> changed_;
  std::vector<OptionIndex> option_;
  std::vector<std::size_t> end_;  // per plan, end of its changes
  std::vector<double> time_s_, energy_j_, before_j_;
};

// A frontier's plans, in order, stored as the changes from the plan before
// (or whole, when a plan changes so much that its changes would take more
// room than a row). Consecutive frontier plans usually differ in a few
// computations, so this holds a refine=False frontier of 10,000+ plans in a
// few bytes per plan and computation less than the rows would; it lets the
// rows a caller builds from the plans (clocks, 4 bytes each) be the only
// dense copy. Any plan can be read back (Reader): a plan is also stored whole
// once the changes since the last whole one add up to kChangesPerWholeRow
// rows, so reading one out of order replays at most that many rows' worth of
// changes, for at most 1/kChangesPerWholeRow more memory than the changes.
// Cost: O(n) per append, O(changes + n) per plan read in order.
class PlanRows {
 public:
  explicit PlanRows(Index num_computations = 0);

  void append(const OptionIndex* row);
  std::size_t size() const { return whole_.size(); }
  Index num_computations() const { return num_computations_; }
  // Plans stored whole (changed too much, or bound a reader's replay).
  std::size_t num_whole() const { return whole_plans_.size(); }
  // Bytes held (capacity of every buffer, the last-row scratch included).
  std::size_t retained_bytes() const;
  // Gives back what appends reserved beyond what is used.
  void shrink_to_fit();

  // Reads plans in any order; reading them in increasing order costs only
  // their changes. Each reader has its own row, so several threads may read
  // one PlanRows at once (none appending).
  class Reader {
   public:
    explicit Reader(const PlanRows& rows);
    // Plan k's row, valid until the next call.
    const OptionIndex* row(std::size_t k);

   private:
    const PlanRows* rows_;
    std::vector<OptionIndex> row_;
    std::size_t next_ = 0;     // the plan after the one in row_ (0: row_ is all zeros)
    std::size_t changed_ = 0;  // where plan next_'s changed computations start
  };

  // Calls visit(k, row) for every plan in order; `row` is valid during the call.
  template <typename Visit>
  void for_each(Visit visit) const {
    Reader reader(*this);
    for (std::size_t k = 0; k < size(); ++k) visit(k, reader.row(k));
  }
  // Every plan's row, plans x computations.
  std::vector<OptionIndex> dense() const;

  // Changes since the last whole plan, in rows, after which a plan is stored
  // whole even if it changes little: bounds an out-of-order read at about
  // this many rows' work, and the whole rows at 1/this of the changes' size.
  static constexpr std::size_t kChangesPerWholeRow = 4;

 private:
  // Whether a plan of this many changes from last_ is stored whole.
  bool stored_whole(std::size_t changes) const;
  void note_stored(bool whole, std::size_t changes);

  Index num_computations_;
  std::vector<OptionIndex> last_;  // the plan appended last
  // Per plan: whether it is stored whole, and where its entries in option_
  // end. A whole plan's entries are its row; a changed plan's are the new
  // options of the computations it changes, which changed_ lists (changed
  // plans only, in order).
  std::vector<bool> whole_;
  std::vector<std::size_t> end_;
  std::vector<OptionIndex> option_;
  std::vector<Index> changed_;
  // The whole plans, increasing, with where the changed plans after each
  // start in changed_ (a reader starts from the last one at or before the
  // plan it wants), and the changes appended since the last whole plan.
  std::vector<std::size_t> whole_plans_, changed_after_whole_;
  std::size_t changes_since_whole_ = 0;
};

}  // namespace perseus
