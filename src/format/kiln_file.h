// The .kiln model file.
//
// Layout (little-endian):
//   [0, 64)    FileHeader: magic "KILNMDL\0", format version, partition count,
//              file size, CRC-32 over the header (crc field zeroed) and table.
//   [64, ...)  PartitionEntry[num_partitions]: type, offset (64-bit), size,
//              CRC-32 of the partition's bytes.
//   partitions: kGraph (JSON: graph, plan, I/O), kWeights (constants blob,
//              page-aligned so it can be mapped and used in place).
//   All reserved fields and every byte outside the header, table and
//   partitions must be zero. The CRC-32 is zlib's (crc32_z, seed 0); the
//   header CRC covers the 64 header bytes with `crc` zeroed, continued over
//   the whole table.
// Everything is verified on load, the plan included (plan::VerifyPlan): the
// file is untrusted input, and checksums only catch accidents. Any
// malformed file yields kCorrupt naming the file and what is wrong.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/weight_ref.h"
#include "ir/graph.h"
#include "plan/memory_plan.h"

namespace kiln::format {

inline constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'M', 'D', 'L', '\0'};
// 2: the graph JSON records the compile target ("target"). Version 1 files
// (no target) are still read, as compiled for "cpu".
// 3: placement. Nodes the target lacks run on the CPU (attribute
// kiln.device = "cpu"), kiln.MemcpyToHost / kiln.MemcpyFromHost nodes move
// values across, and the plan has a host arena (plan.host_arena_size,
// region 2 + inputs + outputs). Older files have neither and read as before.
// Also new in 3: the fused activation "Swish" (kiln.activation, SiLU) and
// the kiln.Gelu op (fuse-gelu).
// 4: the graph JSON records where the external weights are, relative to the
// .kiln file's directory ("weight_dir"), and FileConstant locations are only
// weight_<sha256> or <name>_weight_combined file names. Older files have no
// weight_dir (weights default to <model dir>/weight) and read as before.
// 5: a FileConstant may carry "file_id" instead of "location" (a graph-API
// weight the caller resolves at load, LoadOptions::weight_files); exactly one
// of the two, checked by the one decoder (ops/file_constant.h).
// 6: symbols. A value may carry "sym" (one symbol name per dim, "" for a dim
// without one; present only when some dim is named) and the top-level graph
// "symbols" ({"batch": [min, max]}, max -1 = unbounded): the names of dims
// that vary together and the extents they may take (a model compiled for
// fixed input shapes records min == max). Older files have neither and read
// as before.
// 7: gears. The top-level graph may carry "gears" (1 to 64 signatures, each
// one shape per graph input, in order: shapes the runtime plans at load and
// keeps) with "gears_only" (true: no other signature is admitted). Checked by
// plan::VerifyPlan: ranks, static dims, symbol ranges and one extent per
// symbol within each gear. Older files have none and read as before.
// 8: shape inputs. A top-level graph input may carry "shape_input": true (its
// values decide shapes; the runtime keys plans by them). Checked by
// plan::VerifyPlan (graph inputs only, small static integer or float
// tensors) and recomputed by the loader's inference, which refuses a
// mismatch. Older files have none and read as before.
// 9: a Cast from float32 to bfloat16 may carry the attribute "kiln.round" =
// "nearest_even" (the compiler's Cast where a half graph computed in float32
// returns its results; a model's own Cast truncates). Checked by
// plan::VerifyPlan. Older files have none and read as before.
// 10: a ConvTranspose may carry "kiln.nhwc" = 1 (the layout pass runs it
// channels-last, as Conv and pooling before: its input and output are NHWC).
// Checked by the loader's inference (a 4-D input, channels last); a runtime
// before version 10 would read those tensors as NCHW, so it must refuse the
// file. Older files have none and read as before.
// 11: a kiln.Gelu may carry "approximate" = "tanh" (GELU's tanh
// approximation, fused by fuse-gelu from GPT-2-style graphs), checked by the
// loader's inference ("none" or "tanh", a string); a runtime before 11
// would compute the erf GELU, so it must refuse the file.
// 12: a Conv may carry "kiln.sum" = 1 with a residual as input 3 (fused by
// fuse-residual: Y = act(conv + B + R)), checked by the loader's inference
// (R exactly the output's type and shape), and "kiln.inplace" = 3 (the
// memory plan puts Y over R, read last by that Conv), checked by
// plan::VerifyPlan. A MatMul may carry "kiln.bias" = 1 with a bias [N] as
// input 2, and kiln.activation may be "Gelu" (the erf GELU). A runtime
// before 12 would drop the residual or bias, or read R after it was
// overwritten, so it must refuse the file.
// 13: a ConvInteger / MatMulInteger may carry "kiln.rescale" = 1 with a
// float32 scale as input 4 and an optional float32 bias as input 5 (one
// value, or one per output channel / column) and a fused activation
// (kiln.activation: Relu, LeakyRelu or Clip): its output is float32,
// act(float(sum) * scale + bias) (fused by fuse-integer-rescale); a
// ConvInteger with it may carry "kiln.nhwc" = 1 (channels-last). A
// QLinearMatMul may carry "kiln.dequantize" = 1 with an optional float32
// bias as input 8: its output is float32, (q - y_zero_point) * y_scale +
// bias. Checked by the loader's inference; a runtime before 13 would write
// int32 sums or quantized values, so it must refuse the file.
// 14: a BatchNormalization may carry "kiln.nhwc" = 1 (the layout pass runs
// an inference BatchNormalization that no convolution absorbed channels-last:
// X and Y are NHWC, one parameter per value of the last dim), checked by the
// loader's inference (0 or 1; with 1 a 4-D X, spatial statistics, inference
// mode, one output, parameters sized by the last dim), and a fused
// activation (kiln.activation Relu, LeakyRelu or Clip with kiln.act_alpha /
// kiln.act_beta; another fails kernel creation, naming the node). A runtime
// before 14 would normalise NHWC data per NCHW channel or skip the
// activation, so it must refuse the file.
// 15: a Conv, MatMul or Gemm may carry "kiln.bf16" = 1 (the model computes
// it in bfloat16; half-in-float32 made its operands float32): a CPU with
// native bfloat16 dot products runs it on operands rounded to bfloat16. Checked by the
// loader's inference (0 or 1; 1 only with float32 operands). A runtime
// before 15 would compute it in float32, which is not what the file asks.
// 16: a rescaled ConvInteger / MatMulInteger may carry
// "kiln.quantize_input" = 1 (fuse-quantize-input): its input 0 is the
// float32 x a DynamicQuantizeLinear quantized, input 6 that op's scale and
// input 2 its zero point (uint8), and the op quantizes x itself; = 2:
// that op was the DynamicQuantizeLinear's only reader and computes
// x_scale and the zero point from x too (inputs 2 and 6 absent); with
// "kiln.scale_by_x" = 1 its rescale multiplies by x_scale * input 4.
// Checked by the loader's inference (0, 1 or 2; types and one value each;
// quantize_input only with kiln.rescale, scale_by_x only with
// quantize_input, input 6 only with 1, input 2 not with 2). A rescaled
// ConvInteger may carry "kiln.sum" = 1 with a float32 residual of the
// output's shape as input 7 (fuse-residual: act(float(sum) * S + B + R),
// kiln.activation after the sum), checked likewise. A runtime before 16
// would read float32 data as uint8 or drop the residual, so it must refuse
// the file.
inline constexpr std::uint32_t kFormatVersion = 16;
inline constexpr std::uint32_t kOldestFormatVersion = 1;
inline constexpr std::uint64_t kWeightsAlignment = 4096;

enum class PartitionType : std::uint32_t { kGraph = 1, kWeights = 2 };

#pragma pack(push, 1)
struct FileHeader {
  char magic[8];
  std::uint32_t version;
  std::uint32_t header_size;
  std::uint32_t num_partitions;
  std::uint32_t crc;  // CRC-32 of header (this field 0) followed by the table
  std::uint64_t file_size;
  std::uint64_t table_offset;
  std::uint8_t reserved[24];
};
struct PartitionEntry {
  std::uint32_t type;
  std::uint32_t flags;
  std::uint64_t offset;
  std::uint64_t size;
  std::uint32_t crc;
  std::uint32_t reserved;
};
#pragma pack(pop)
static_assert(sizeof(FileHeader) == 64);
static_assert(sizeof(PartitionEntry) == 32);

// A compiled model in memory: the optimised graph and its memory plan.
struct CompiledModel {
  std::unique_ptr<ir::Graph> graph;
  plan::MemoryPlan plan;
  // Custom op types the graph uses (recorded so a load without their
  // package fails clearly).
  std::vector<std::string> custom_op_types;
  // The device spec it was compiled for ("cpu", "sim:lack=Relu").
  std::string target = "cpu";
  // Where its external weights are, relative to the directory of the .kiln
  // file ("weight", "../store"); empty: not recorded (<model dir>/weight).
  // Generic form ('/' separators); see CheckWeightDirField.
  std::string weight_dir;
};

// Writes `model` to `path` atomically (temporary name, then rename).
Status WriteModelFile(const CompiledModel& model, const std::string& path);

// A mapped, verified model file. Constants of the returned graph point into
// the mapping, which stays alive as long as any of them does.
struct LoadedFile {
  CompiledModel model;
  std::shared_ptr<const void> mapping;
  std::uint64_t file_size = 0;
};
struct ReadOptions {
  bool verify_weights_checksum = true;
};
// Opens `path` with OpenRegularFile (a FIFO, device or directory is refused
// without blocking), maps it and runs ParseModelImage on the mapping.
// Never throws.
Result<LoadedFile> ReadModelFile(const std::string& path, const ReadOptions& opts = {});

// Verifies and parses a .kiln image held in memory at [data, data+size)
// (64-byte aligned): header, table, padding and checksums, the JSON graph
// partition (ParseModelJson), then the plan (plan::VerifyPlan). Constants
// borrow from `data`, kept alive by `owner` (`file_pages`: `data` is a
// read-only file mapping, HostTensor::file_pages); `what` names the file in
// errors. Everything here treats the bytes as untrusted; it never throws.
// (The entry point for fuzzing the loader without a file.)
Result<CompiledModel> ParseModelImage(const std::uint8_t* data, std::uint64_t size,
                                      std::shared_ptr<const void> owner, const std::string& what,
                                      const ReadOptions& opts = {}, bool file_pages = false);

std::uint32_t Crc32(const void* data, std::size_t size, std::uint32_t seed = 0);

}  // namespace kiln::format

namespace kiln {

// The FileConstants of a compiled graph, If branches' included, decoded
// (ops/file_constant.h); the first that does not decode is the error.
Result<std::vector<weights::WeightRef>> ListExternalWeights(const ir::Graph& g);

}  // namespace kiln
