// Helpers shared by Kiln's libFuzzer targets (tests/fuzz/README.md).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace kiln_fuzz {

// A private scratch directory per fuzzing process, in memory (/dev/shm when it
// exists), removed at exit. APIs that only take paths get their bytes there.
inline const std::string& ScratchDir() {
  // Never destroyed: the atexit handler below runs after static destructors.
  static const std::string* dir = [] {
    std::string base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
    if (const char* e = std::getenv("KILN_FUZZ_TMP")) base = e;
    auto* d = new std::string(base + "/kiln-fuzz-" + std::to_string(getpid()));
    std::error_code ec;
    std::filesystem::remove_all(*d, ec);
    std::filesystem::create_directories(*d);
    std::atexit([] {
      std::error_code ec2;
      std::filesystem::remove_all(ScratchDir(), ec2);
    });
    return d;
  }();
  return *dir;
}

// Writes `size` bytes to `path` (replacing it); aborts on I/O failure, which
// is the harness's fault, not the code under test's.
inline void WriteBytes(const std::string& path, const void* data, std::size_t size) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) { std::perror(path.c_str()); std::abort(); }
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n <= 0) { std::perror(path.c_str()); std::abort(); }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  close(fd);
}

// Counters printed once at exit as one line "kiln-fuzz-stats <target>: k=v ...",
// which tests/fuzz/run_fuzz.sh collects into its summary.
struct Stats {
  const char* target;
  std::uint64_t inputs = 0;
  std::uint64_t c[4] = {};
  const char* names[4] = {};
};
inline Stats* g_stats = nullptr;
inline void InitStats(Stats* s) {
  g_stats = s;
  std::atexit([] {
    Stats& st = *g_stats;
    std::fprintf(stderr, "kiln-fuzz-stats %s: inputs=%llu", st.target,
                 static_cast<unsigned long long>(st.inputs));
    for (int i = 0; i < 4; ++i) {
      if (!st.names[i]) continue;
      std::fprintf(stderr, " %s=%llu (%.1f%%)", st.names[i], static_cast<unsigned long long>(st.c[i]),
                   st.inputs ? 100.0 * static_cast<double>(st.c[i]) / static_cast<double>(st.inputs) : 0.0);
    }
    std::fprintf(stderr, "\n");
  });
}

}  // namespace kiln_fuzz
