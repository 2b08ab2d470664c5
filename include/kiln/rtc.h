// Kiln runtime kernel compilation (RTC), CPU implementation: C++ source is
// compiled by the system C++ compiler into a shared object, cached on disk,
// and loaded with dlopen. Custom operators use it at model-load time.
//
//   kiln::rtc::ProgramOptions opts;
//   opts.flags = {"-O3", "-DVEC=8"};
//   auto prog = kiln::rtc::Program::Create("add", source, opts);
//   if (!prog.ok()) { ... prog.status().ToString() ... }
//   kiln::Status s = (*prog)->Compile();  // a cache hit runs no compiler
//   if (!s.ok()) { ... s.message() ends with the compiler's log ... }
//   auto mod = kiln::rtc::Module::Load(**prog);
//   auto add = (*mod)->FunctionAs<void(const float*, const float*, float*, long)>("add");
//   (*add)(a, b, c, n);  // valid only while the Module (*mod) is alive
//
// Compiler: $KILN_RTC_CXX (one executable: a path, or a name looked up on
// PATH; use a wrapper script if it needs arguments), else `c++` on PATH.
// Command line (an argv, never a shell):
//   <compiler> -shared -fPIC -O2 [-fno-gnu-unique] [-Iinc] <flags...> -o <name>.so <name>.cc
// run in a private temporary directory with stdin from /dev/null, stdout and
// stderr captured into the log, LC_ALL=C (so logs and `--version` do not
// depend on the locale), its own process group, and a time limit.
//
// Cache: $KILN_RTC_CACHE_DIR, else $XDG_CACHE_HOME/kiln/rtc, else
// ~/.cache/kiln/rtc (created 0700). One file per program, `<key>.rtc`, where
// key = SHA-256 over: the source file name, source and headers, the base and user
// flags, the compiler's resolved path and `--version` output, the host
// architecture, the CPU model and features when a flag mentions `native`,
// and GCC_EXEC_PREFIX / COMPILER_PATH / LIBRARY_PATH. The file holds the
// shared object and the compile log (so warnings survive a hit) behind a
// SHA-256 checksum; a damaged, foreign-owned or group/world-writable entry
// is ignored (recompiled and replaced). Entries are written to a temporary
// name and renamed, so concurrent processes are safe (two processes missing
// the same key both compile; the last rename wins; both results are valid).
// Writing the cache is best effort: a read-only cache only costs compiles.
// Nothing is ever evicted; delete the directory to clear it.
//
// The compiler's `--version` is remembered in the process and in the cache
// directory (`compiler-<hash of its path>.id`), keyed by the stat of the
// compiler file (device, inode, size, mtime): it runs again only when that
// file changes. So a cache hit, even a new process's first, starts no
// process: it is a few stats, two hashes and two small reads (~0.05 ms; ~1 ms
// for a process's first). The compiler must exist even for a hit (it is part
// of the key); to run where there is none, ship Program::Binary() and use
// Module::LoadBinary.
//
// With GCC, -fno-gnu-unique is added to the base flags: otherwise static
// locals of inline functions become STB_GNU_UNIQUE symbols, which the
// dynamic linker shares process-wide even between RTLD_LOCAL objects, and
// which keep an object from ever being unloaded.
//
// Thread safety: one Program or Module per thread at a time for the
// non-const calls; different Programs may compile concurrently, and
// Module::Function may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/status.h"

namespace kiln::rtc {

// A header the source may #include (as "name" or <name>). Headers reach the
// compiler only this way (-I is not accepted) so that the cache key covers
// everything the program includes besides the system headers.
struct Header {
  std::string name;    // relative path: letters, digits, "_.+-/", no "..", e.g. "kiln/vec.h"
  std::string source;
};

struct ProgramOptions {
  // Extra compiler flags, appended after the base flags (so "-O3" wins over
  // the base -O2). Accepted, each as one joined argument:
  //   -O<level>  -g<...>  -D<macro>[=<value>]  -U<macro>  -std=<std>
  //   -f<feature> (not -fplugin*, -fprofile*, -fauto-profile*, -fdump*, -fsyntax-only)
  //   -m<option> (e.g. -march=native)  -W<warning> (not -Wl, -Wa, -Wp,)  -w
  //   -pedantic[-errors]  -pthread  -l<library>
  // Anything else (-o, -c, -x, -I, -include, -B, --sysroot, @file, file names,
  // a bare "-D" followed by its value, ...) is rejected by Create.
  std::vector<std::string> flags;
  std::vector<Header> headers;
  // Wall-clock limit for one compile; past it the compiler's process group
  // is killed and Compile fails.
  double timeout_seconds = 120;
  // false: neither read nor write the disk cache.
  bool use_cache = true;
};

// A program: source plus options, compiled at most once.
class Program {
 public:
  // Checks the options (kInvalidArgument naming a rejected flag or header).
  // `name` names the source file (`<name>.cc`, characters outside
  // [A-Za-z0-9_.-] become '_', so it shows in the log) and the program in
  // every error; empty means "program". No compiler runs here.
  static Result<std::unique_ptr<Program>> Create(std::string name, std::string source,
                                                 ProgramOptions options = {});

  // Looks the program up in the disk cache, else runs the compiler.
  // A second call after success does nothing. Errors:
  //   kNotFound         the compiler is not there (names it and KILN_RTC_CXX)
  //   kInvalidArgument  the source failed to compile (the message ends with
  //                     the compiler's log, also in log()), the compiler
  //                     exceeded timeout_seconds, or it is not a working
  //                     compiler (`--version` failed)
  //   kIoError          a temporary file or the compiler process could not be
  //                     created
  Status Compile();

  // The compiler's output (warnings, errors) of the last Compile, from the
  // cache on a hit; empty before Compile. Capped at 1 MiB.
  const std::string& log() const { return log_; }
  // A copy of the shared object (ELF). kInvalidArgument before a successful
  // Compile.
  Result<std::vector<std::uint8_t>> Binary() const;
  bool compiled() const { return compiled_; }
  // True when the last successful Compile was served by the disk cache.
  bool from_cache() const { return from_cache_; }
  // 64 hex digits identifying source + options + compiler; set by Compile
  // (also when compiling fails), empty before.
  const std::string& cache_key() const { return key_; }
  const std::string& name() const { return name_; }
  const std::string& source() const { return source_; }
  const ProgramOptions& options() const { return options_; }

 private:
  Program(std::string name, std::string source, ProgramOptions options);
  friend class Module;

  std::string name_, file_stem_, source_;
  ProgramOptions options_;
  std::string log_, key_;
  std::vector<std::uint8_t> binary_;
  bool compiled_ = false, from_cache_ = false;
};

// A loaded shared object (dlopen, RTLD_NOW | RTLD_LOCAL: its symbols do not
// leak into the process's global namespace). Every Load creates a new,
// independent instance (its own copy of static data), even of the same
// binary. Loading runs the object's static initializers. The object is
// dlclosed when the last shared_ptr goes: function pointers taken from a
// Module must not be used after that. The binary is loaded from an anonymous
// memory file (memfd), or a private temporary file that is unlinked at once,
// so nothing is left on disk.
class Module {
 public:
  // Loads a compiled program (kInvalidArgument if it is not compiled).
  static Result<std::shared_ptr<Module>> Load(const Program& program);
  // Loads a shared object's bytes, e.g. a saved Program::Binary(). `name`
  // only labels errors. kInvalidArgument: not an ELF shared object for this
  // machine, truncated (every header and segment must lie inside the
  // bytes: dlopen itself would map past the end and crash), or dlopen failed
  // (e.g. an undefined symbol: dlerror's text). Beyond those checks the
  // bytes are trusted: loading runs their code.
  static Result<std::shared_ptr<Module>> LoadBinary(const std::vector<std::uint8_t>& binary,
                                                    std::string name = "binary");
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Address of a symbol defined in this object (C++ functions need
  // extern "C" to be found by their plain name). kNotFound naming the
  // symbol and module if there is none, or if the name only resolves in a
  // library the object depends on (e.g. "malloc" in libc).
  Result<void*> Function(const std::string& symbol) const;
  // Function() cast to a function pointer type: FunctionAs<void(float*, long)>("f").
  template <typename Fn>
  Result<Fn*> FunctionAs(const std::string& symbol) const {
    static_assert(std::is_function_v<Fn>, "FunctionAs<Fn>: Fn must be a function type");
    Result<void*> p = Function(symbol);
    if (!p.ok()) return p.status();
    return reinterpret_cast<Fn*>(p.value());
  }
  const std::string& name() const { return name_; }

 private:
  Module(void* handle, std::string name);
  void* handle_;
  std::string name_;
};

// Process-wide counters (all threads).
struct CacheStats {
  std::uint64_t compiles = 0;         // compiler runs for a program (success or failure)
  std::uint64_t hits = 0;             // Compile calls served by the disk cache
  std::uint64_t failed_compiles = 0;  // compiler runs that failed or timed out
  std::uint64_t corrupt_entries = 0;  // cache entries ignored as damaged or untrusted
  std::uint64_t store_failures = 0;   // compiled binaries that could not be cached
};
CacheStats GetCacheStats();

// The cache directory Compile would use now (from the environment), or empty
// if none can be determined (no HOME).
std::string CacheDirectory();

}  // namespace kiln::rtc
