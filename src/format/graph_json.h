// JSON form of a graph and its memory plan (the .kiln graph partition).
// Constant data is not embedded: each constant refers to its plan placement in
// the weights blob.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "format/kiln_file.h"

namespace kiln::format {

// Never throws: a name or string that is not valid UTF-8 (or running out of
// memory) is an error naming it.
Result<std::string> SerializeModelJson(const CompiledModel& model);

// Parses [text, text+size) (untrusted); constants are borrowed from
// [weights, weights+weights_size) and kept alive by `owner` (`file_pages`:
// that range is a read-only file mapping, HostTensor::file_pages). Never throws.
// Errors are kCorrupt naming the offending field (its JSON path), value or
// node. Only syntax and name resolution are checked here; roles, placements
// and sizes are plan::VerifyPlan's, op semantics are checked at Model::Load.
Result<CompiledModel> ParseModelJson(const char* text, std::size_t size, const std::uint8_t* weights,
                                     std::uint64_t weights_size, std::shared_ptr<const void> owner,
                                     bool file_pages = false);

}  // namespace kiln::format
