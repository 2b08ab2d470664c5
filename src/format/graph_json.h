// JSON form of a graph and its memory plan (the .kiln graph partition).
// Constant data is not embedded: each constant refers to its plan placement in
// the weights blob.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "format/kiln_file.h"

namespace kiln::format {

std::string SerializeModelJson(const CompiledModel& model);

// Parses and validates; constants are borrowed from [weights, weights+size)
// and kept alive by `owner`. Errors are kCorrupt with the offending field.
Result<CompiledModel> ParseModelJson(const std::string& json, const std::uint8_t* weights,
                                     std::uint64_t weights_size,
                                     std::shared_ptr<const void> owner);

}  // namespace kiln::format
