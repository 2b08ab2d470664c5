// Test hooks of the CPU RTC (src/rtc/cpu_rtc.cc); not part of the API.
#pragma once

namespace kiln::rtc::internal {

// Forgets the compilers' `--version` remembered in this process, as if it
// had just started (the copies remembered in cache directories stay).
void ForgetCompilersForTesting();

}  // namespace kiln::rtc::internal
