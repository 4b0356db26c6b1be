#include "max_flow.hpp"

#include <algorithm>
#include <stdexcept>

namespace perseus {

FlowNetwork::FlowNetwork(Index num_nodes) : num_nodes_(num_nodes) {}

Index FlowNetwork::add_arc(Index from, Index to) {
  if (finalized_) throw std::logic_error("FlowNetwork: add_arc after finalize");
  const auto id = static_cast<Index>(head_.size());
  tail_.push_back(from);
  head_.push_back(to);
  tail_.push_back(to);
  head_.push_back(from);
  return id;
}

void FlowNetwork::finalize() {
  const auto n = static_cast<std::size_t>(num_nodes_);
  adj_offset_.assign(n + 1, 0);
  for (const Index t : tail_) ++adj_offset_[static_cast<std::size_t>(t) + 1];
  for (std::size_t v = 0; v < n; ++v) adj_offset_[v + 1] += adj_offset_[v];
  adj_.resize(tail_.size());
  std::vector<Index> fill(adj_offset_.begin(), adj_offset_.end() - 1);
  for (std::size_t a = 0; a < tail_.size(); ++a)
    adj_[static_cast<std::size_t>(fill[static_cast<std::size_t>(tail_[a])]++)] =
        static_cast<Index>(a);
  residual_.assign(tail_.size(), 0.0);
  level_.assign(n, -1);
  next_arc_.assign(n, 0);
  queue_.assign(n, 0);
  path_.assign(n, 0);
  finalized_ = true;
}

template <typename Usable>
void FlowNetwork::breadth_first(Index source, Usable usable) {
  std::fill(level_.begin(), level_.end(), -1);
  std::size_t head = 0, tail = 0;
  level_[static_cast<std::size_t>(source)] = 0;
  queue_[tail++] = source;
  while (head < tail) {
    const Index u = queue_[head++];
    for (Index k = adj_offset_[static_cast<std::size_t>(u)];
         k < adj_offset_[static_cast<std::size_t>(u) + 1]; ++k) {
      const Index a = adj_[static_cast<std::size_t>(k)];
      const Index v = head_[static_cast<std::size_t>(a)];
      if (level_[static_cast<std::size_t>(v)] < 0 && usable(residual_[static_cast<std::size_t>(a)])) {
        level_[static_cast<std::size_t>(v)] = level_[static_cast<std::size_t>(u)] + 1;
        queue_[tail++] = v;
      }
    }
  }
}

bool FlowNetwork::build_levels(Index source, Index sink, double tolerance) {
  breadth_first(source, [tolerance](double r) { return r > tolerance; });
  return level_[static_cast<std::size_t>(sink)] >= 0;
}

double FlowNetwork::augment_blocking_flow(Index source, Index sink, double tolerance) {
  for (std::size_t v = 0; v < next_arc_.size(); ++v) next_arc_[v] = adj_offset_[v];
  double total = 0.0;
  std::size_t depth = 0;  // path_[0 .. depth) are arcs from source
  Index u = source;
  while (true) {
    if (u == sink) {
      double push = kInfinity;
      for (std::size_t i = 0; i < depth; ++i)
        push = std::min(push, residual_[static_cast<std::size_t>(path_[i])]);
      if (push == kInfinity) throw std::logic_error("FlowNetwork: infinite augmenting path");
      std::size_t retreat = depth;
      for (std::size_t i = 0; i < depth; ++i) {
        const auto a = static_cast<std::size_t>(path_[i]);
        residual_[a] -= push;
        residual_[a ^ 1] += push;
        if (residual_[a] <= tolerance && retreat == depth) retreat = i;
      }
      total += push;
      if (retreat == depth) retreat = 0;  // nothing saturated (rounding): restart
      depth = retreat;  // resume from the tail of the first saturated arc
      u = depth == 0 ? source : tail_[static_cast<std::size_t>(path_[depth])];
      continue;
    }
    bool advanced = false;
    const auto us = static_cast<std::size_t>(u);
    for (Index& k = next_arc_[us]; k < adj_offset_[us + 1]; ++k) {
      const Index a = adj_[static_cast<std::size_t>(k)];
      const Index v = head_[static_cast<std::size_t>(a)];
      if (residual_[static_cast<std::size_t>(a)] > tolerance &&
          level_[static_cast<std::size_t>(v)] == level_[us] + 1) {
        path_[depth++] = a;
        u = v;
        advanced = true;
        break;
      }
    }
    if (advanced) continue;
    // Dead end: retire u from this level graph and step back.
    level_[us] = -1;
    if (depth == 0) break;
    --depth;
    u = tail_[static_cast<std::size_t>(path_[depth])];
    ++next_arc_[static_cast<std::size_t>(u)];
  }
  return total;
}

double FlowNetwork::max_flow(Index source, Index sink, double tolerance) {
  double total = 0.0;
  while (build_levels(source, sink, tolerance)) total += augment_blocking_flow(source, sink, tolerance);
  return total;
}

bool FlowNetwork::has_infinite_path(Index source, Index sink) {
  breadth_first(source, [](double r) { return r == kInfinity; });
  return level_[static_cast<std::size_t>(sink)] >= 0;
}

const std::vector<Index>& FlowNetwork::reachable_from(Index source, double tolerance) {
  breadth_first(source, [tolerance](double r) { return r > tolerance; });
  return level_;
}

}  // namespace perseus
