// Memory planning: every tensor of a compiled graph gets a (region, offset).
//
// Regions: 0 = constants (the weights blob), 1 = the feature-map arena (in
// the device's memory), 2.. = model inputs (2 + i) then model outputs
// (2 + num_inputs + j), then the host arena (2 + num_inputs + num_outputs:
// values written by nodes placed on the CPU, see ir::kPlaceAttr). The
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
  std::uint64_t host_arena_size = 0; // bytes of the host arena (0: nothing runs on the CPU)
  std::uint64_t no_reuse_size = 0;   // sum of all intermediates (no sharing)
  std::uint64_t lower_bound = 0;     // largest set of simultaneously live bytes
  std::uint64_t const_size = 0;      // bytes of the constants blob
  std::unordered_map<std::string, Placement> placements;  // by value name
};

// The host arena's region for a graph with these many inputs and outputs.
inline int HostArenaRegion(std::size_t num_inputs, std::size_t num_outputs) {
  return kRegionIoBase + static_cast<int>(num_inputs + num_outputs);
}
// Whether `v` lives in host memory: written by a CPU-placed node or a
// kiln.MemcpyToHost.
bool LivesOnHost(const ir::Value* v);

// Attribute set on view nodes whose output aliases their input.
inline constexpr const char* kAliasAttr = "kiln.alias";

// Attribute (int: an input index) set on nodes whose output 0 takes the
// bytes of that input, read last by this node: a Conv's fused residual
// (kiln.sum, input 3), summed onto in place instead of copied. Views of that
// input share its bytes and must not be read later either.
inline constexpr const char* kInPlaceAttr = "kiln.inplace";
// The input `n` may overwrite with its output 0 (InPlaceAttr), or -1.
int InPlaceCandidate(const ir::Node& n);

// Plans `g` (topologically sorted, all shapes static). Marks alias and
// in-place nodes.
Result<MemoryPlan> PlanMemory(ir::Graph& g);

// The loader's verifier: checks a graph and plan read from an untrusted
// .kiln file before any kernel (or allocation) sees them, like a bytecode
// verifier. `const_base`/`const_bytes` is the weights partition the graph's
// top-level constants point into. Checks, with kCorrupt errors naming the
// value or node, the offset, size and region:
//  - every value (subgraphs too): a supported dtype, a static shape whose
//    byte size passes CheckedTensorBytes, a dynamic mask within its rank;
//    symbols ("sym", format version 6): one name per dim ("" = none), each
//    1 to 256 bytes of UTF-8 and a symbol of the top-level graph whose range
//    holds the dim's extent (a data-dependent dim's bound is not checked);
//  - symbols: only the top-level graph has them; each range has
//    0 <= min <= max <= kMaxTensorBytes, or max = -1 (unbounded);
//  - roles: graph inputs distinct, not constants, not written by a node and
//    (top level) not data-dependent; graph outputs distinct, written by
//    exactly one node, neither inputs, constants nor external weights;
//    subgraphs self-contained (no outer reads), no FileConstant inside them;
//  - placement (every graph): kiln.device is absent or "cpu", never on If,
//    kiln-domain or custom nodes; a CPU-placed node reads only constants and
//    host values and writes no graph output; a target node reads no host
//    value, except kiln.MemcpyFromHost, which reads only host values;
//    kiln.MemcpyToHost reads no host value; outputs are not host values;
//  - placements: each names an existing value of the top graph and a region
//    that exists; host values in the host arena and no others there; size == dtype size x element count; constants only in
//    region 0 at their data's offset (64-byte aligned, inside the weights
//    partition); arena placements only for intermediates (written by a node,
//    not an I/O value), 64-byte aligned, inside arena_size (checked
//    arithmetic); input i only in region 2+i and output j only in region
//    2+n_in+j, both at offset 0; every value a kernel touches is placed;
//  - const_size equals the weights partition; arena_size (host_arena_size)
//    equals what the arena (host arena) placements need (so 2^64-1 is refused before any allocation);
//  - view nodes marked kiln.alias are view ops whose output has exactly
//    their input's arena bytes;
//  - nodes marked kiln.inplace = k are InPlaceCandidate()s with k their
//    candidate input, output 0 has exactly input k's arena bytes, and no
//    later node reads input k or a value sharing its bytes;
//  - tensors of one arena that are live at the same time do not share bytes.
// Op semantics (definitions, versions, attributes, shape inference) are
// checked against the recorded shapes at Model::Load.
Status VerifyPlan(const ir::Graph& g, const MemoryPlan& plan, const void* const_base, std::uint64_t const_bytes);

// The graph part of VerifyPlan (values, roles, subgraphs), for graphs
// without a plan.
Status VerifyGraph(const ir::Graph& g);

}  // namespace kiln::plan
