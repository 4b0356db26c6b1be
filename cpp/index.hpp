// Ids, typed by role, and the one conversion the core needs everywhere.
//
// Computations, DAG nodes, option groups and flow-network nodes are dense
// signed 32-bit ids (a pipeline has at most 2^30 computations); containers
// are indexed with std::size_t. Where two roles meet in one function (a
// computation id and its place in topological order; a flow node and a flow
// arc) each role has its own type, Id<Tag>, and arrays keyed by it are
// IdVector<Key, T>: indexing a computation-keyed array with a position, or
// passing an arc where a node is expected, does not compile. An Id is a
// plain int32 in a struct, so it costs nothing at -O2 (the frontiers and the
// callgrind instruction counts are unchanged). Plain `Index` stays for
// counts and for ids in code where one role is in play; `ix` is the one
// place that converts it, so the code reads `start[ix(v)]`.
//
// Preconditions (ids in range, non-negative) are checked in debug builds
// through PERSEUS_EXPECT (precondition.hpp) and compile away under NDEBUG.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "precondition.hpp"

namespace perseus {

using Index = std::int32_t;

// Precondition: i >= 0.
constexpr std::size_t ix(Index i) { return static_cast<std::size_t>(i); }
constexpr std::size_t ix(std::int64_t i) { return static_cast<std::size_t>(i); }

// An id of one role. Construction from a raw int is explicit; none() (-1)
// marks "no such id" where a slot may be empty.
template <class Tag>
class Id {
 public:
  constexpr Id() = default;
  constexpr explicit Id(Index value) : value_(value) {}
  static constexpr Id none() { return Id(-1); }

  constexpr Index value() const { return value_; }
  constexpr bool valid() const { return value_ >= 0; }
  // The container index; the id must not be none().
  std::size_t index() const {
    PERSEUS_EXPECT(value_ >= 0, "an id used as an index is negative");
    return static_cast<std::size_t>(value_);
  }

  Id& operator++() {
    ++value_;
    return *this;
  }
  friend constexpr bool operator==(Id a, Id b) { return a.value_ == b.value_; }
  friend constexpr bool operator!=(Id a, Id b) { return a.value_ != b.value_; }
  friend constexpr bool operator<(Id a, Id b) { return a.value_ < b.value_; }
  friend constexpr bool operator<=(Id a, Id b) { return a.value_ <= b.value_; }
  friend constexpr bool operator>(Id a, Id b) { return a.value_ > b.value_; }
  friend constexpr bool operator>=(Id a, Id b) { return a.value_ >= b.value_; }

 private:
  Index value_ = 0;
};

// A std::vector whose subscript takes one role's id, range-checked in debug
// builds. raw() is the plain vector for code that sweeps it by std::size_t
// (a sweep in the role's own order, where no other role can slip in).
template <class Key, class T>
class IdVector {
 public:
  IdVector() = default;
  explicit IdVector(std::size_t count, const T& value = T{}) : items_(count, value) {}

  T& operator[](Key key) {
    PERSEUS_EXPECT(key.index() < items_.size(), "an id is past the end of its array");
    return items_[key.index()];
  }
  const T& operator[](Key key) const {
    PERSEUS_EXPECT(key.index() < items_.size(), "an id is past the end of its array");
    return items_[key.index()];
  }

  std::size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  void assign(std::size_t count, const T& value) { items_.assign(count, value); }
  void resize(std::size_t count) { items_.resize(count); }
  void reserve(std::size_t count) { items_.reserve(count); }
  void clear() { items_.clear(); }
  void push_back(const T& value) { items_.push_back(value); }
  template <class... Args>
  void emplace_back(Args&&... args) {
    items_.emplace_back(std::forward<Args>(args)...);
  }
  // The next key push_back() fills.
  Key next_key() const { return Key(static_cast<Index>(items_.size())); }
  T* data() { return items_.data(); }
  const T* data() const { return items_.data(); }
  std::vector<T>& raw() { return items_; }
  const std::vector<T>& raw() const { return items_; }
  auto begin() { return items_.begin(); }
  auto end() { return items_.end(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<T> items_;
};

// The roles. A computation id is also its DAG node id (Pipeline and Dag
// share the numbering); a position is a place in the DAG's topological
// order (PathTimes keeps its arrays in that order); flow nodes and flow arcs
// are BoundedFlow's; an option group is a stage's forward or backward pass
// (group_of(), options.hpp), whose options OptionTable keeps.
using ComputationId = Id<struct ComputationTag>;
using Position = Id<struct PositionTag>;
using GroupId = Id<struct GroupTag>;
using FlowNode = Id<struct FlowNodeTag>;
using FlowArc = Id<struct FlowArcTag>;

}  // namespace perseus
