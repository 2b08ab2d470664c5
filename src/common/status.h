#pragma once
#include "kiln/status.h"  // IWYU pragma: export
