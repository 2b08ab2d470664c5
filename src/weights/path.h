// Resolving a weight location inside its directory, safely.
#pragma once

#include <filesystem>
#include <string>

#include "common/status.h"

namespace kiln::weights {

// `location` must be a relative path without "..", and must not resolve
// (through symlinks) outside `dir`. `what` prefixes error messages (e.g.
// "initializer 'w'"). Returns the canonical path.
Result<std::filesystem::path> ResolveInside(const std::filesystem::path& dir, const std::string& location,
                                            const std::string& what);

}  // namespace kiln::weights
