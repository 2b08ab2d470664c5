#include "backends/cpu/kernel.h"  // sideways into a backend
#include "device/device.h"
#include "kiln/status.h"
