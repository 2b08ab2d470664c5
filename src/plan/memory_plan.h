// Memory planning: every tensor of a compiled graph gets a (region, offset).
//
// Regions: 0 = constants (the weights blob), 1 = the feature-map arena,
// 2.. = model inputs (2 + i) then model outputs (2 + num_inputs + j). The
// arena is shared by intermediates whose lifetimes do not overlap (greedy
// best-fit by size); view ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity)
// on arena tensors alias their input and run no kernel.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "common/status.h"
#include "ir/graph.h"

namespace kiln::plan {

inline constexpr int kRegionConst = 0;
inline constexpr int kRegionArena = 1;
inline constexpr int kRegionIoBase = 2;
inline constexpr std::uint64_t kAlignment = 64;

struct Placement {
  int region = -1;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
};

struct MemoryPlan {
  std::uint64_t arena_size = 0;      // bytes of the shared feature-map arena
  std::uint64_t no_reuse_size = 0;   // sum of all intermediates (no sharing)
  std::uint64_t lower_bound = 0;     // largest set of simultaneously live bytes
  std::uint64_t const_size = 0;      // bytes of the constants blob
  std::unordered_map<std::string, Placement> placements;  // by value name
};

// Attribute set on view nodes whose output aliases their input.
inline constexpr const char* kAliasAttr = "kiln.alias";

// Plans `g` (topologically sorted, all shapes static). Marks alias nodes.
Result<MemoryPlan> PlanMemory(ir::Graph& g);

}  // namespace kiln::plan
