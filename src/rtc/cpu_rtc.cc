// Runtime kernel compilation, CPU: the system C++ compiler into a shared
// object, cached on disk, loaded with dlopen. See include/kiln/rtc.h.
#include "kiln/rtc.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>

#include "rtc/cache_store.h"
#include "rtc/cpu_rtc_internal.h"
#include "weights/sha256.h"

extern char** environ;

namespace kiln::rtc {
namespace {

namespace fs = std::filesystem;
using store::Fd;
using store::ReadFd;
using store::WriteAll;

// ---- cache entries ----

std::string EntryPath(const std::string& dir, const std::string& key) { return dir + "/" + key + ".rtc"; }

using store::WriteEntry;

constexpr const char* kBaseFlags[] = {"-shared", "-fPIC", "-O2"};
// GCC only (clang does not emit them): without it, static locals of inline
// functions and template statics become STB_GNU_UNIQUE symbols, which the
// dynamic linker binds process-wide across RTLD_LOCAL objects (two modules
// would share one `static`) and which make an object impossible to unload.
constexpr const char* kGccFlags[] = {"-fno-gnu-unique"};
constexpr std::size_t kMaxLog = 1u << 20;
constexpr double kVersionTimeoutSeconds = 30;

// ---- counters ----

struct Counters {
  std::atomic<std::uint64_t> compiles{0}, hits{0}, failed_compiles{0}, corrupt{0}, store_failures{0};
};
Counters& Stats() {
  static Counters c;
  return c;
}

// true: a valid entry was read (a damaged or untrusted one is counted).
bool ReadEntry(const std::string& path, std::string* log, std::vector<std::uint8_t>* binary) {
  const store::ReadResult r = store::ReadEntry(path, log, binary);
  if (r == store::ReadResult::kUntrusted) ++Stats().corrupt;
  return r == store::ReadResult::kHit;
}

// Remembers a compiler's `--version` across processes.
std::string CompilerIdPath(const std::string& dir, const std::string& compiler_path) {
  return dir + "/compiler-" + weights::Sha256Hex(compiler_path.data(), compiler_path.size()).substr(0, 32) + ".id";
}

// ---- small OS helpers ----

std::string Errno(int e = errno) { return std::strerror(e); }

Status WriteFile(const std::string& path, std::string_view data) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (fd.get() < 0) return Error(StatusCode::kIoError, "cannot create ", path, ": ", Errno());
  if (!WriteAll(fd.get(), data.data(), data.size()))
    return Error(StatusCode::kIoError, "cannot write ", path, ": ", Errno());
  return Status::Ok();
}

// An unnamed scratch file (memfd, else an unlinked temporary file).
Result<Fd> ScratchFile(const char* label) {
  int fd = ::memfd_create(label, MFD_CLOEXEC);
  if (fd >= 0) return Fd(fd);
  std::error_code ec;
  fs::path dir = fs::temp_directory_path(ec);
  std::string tmpl = ((ec ? fs::path("/tmp") : dir) / "kiln_rtc_XXXXXX").string();
  fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
  if (fd < 0) return Error(StatusCode::kIoError, "cannot create a temporary file: ", Errno());
  ::unlink(tmpl.c_str());
  return Fd(fd);
}

// A private temporary directory, removed at destruction.
class TempDir {
 public:
  static Result<std::unique_ptr<TempDir>> Create() {
    std::error_code ec;
    fs::path dir = fs::temp_directory_path(ec);
    std::string tmpl = ((ec ? fs::path("/tmp") : dir) / "kiln_rtc_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      return Error(StatusCode::kIoError, "cannot create a temporary directory (", tmpl, "): ", Errno());
    return std::unique_ptr<TempDir>(new TempDir(tmpl));
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string p) : path_(std::move(p)) {}
  std::string path_;
};

std::string Getenv(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// ---- child processes ----

// The environment a compiler runs with: ours, with a fixed locale and without
// the variables that add include directories or write dependency files
// behind the cache key's back.
class ChildEnv {
 public:
  ChildEnv() {
    static constexpr std::string_view kDropped[] = {
        "LANG=", "LANGUAGE=", "LC_", "CPATH=", "C_INCLUDE_PATH=", "CPLUS_INCLUDE_PATH=",
        "OBJC_INCLUDE_PATH=", "DEPENDENCIES_OUTPUT=", "SUNPRO_DEPENDENCIES=", "GCC_COLORS="};
    for (char** e = environ; e && *e; ++e) {
      std::string_view kv(*e);
      bool drop = false;
      for (std::string_view d : kDropped) drop = drop || kv.substr(0, d.size()) == d;
      if (!drop) vars_.emplace_back(kv);
    }
    vars_.emplace_back("LC_ALL=C");
    for (auto& v : vars_) ptrs_.push_back(v.data());
    ptrs_.push_back(nullptr);
  }
  char** data() { return ptrs_.data(); }

 private:
  std::vector<std::string> vars_;
  std::vector<char*> ptrs_;
};

struct ProcessResult {
  bool timed_out = false;
  int exit_code = -1;   // when it exited
  int term_signal = 0;  // when a signal ended it
  std::string Describe() const {
    if (timed_out) return "timed out";
    if (term_signal) return StrCat("was killed by signal ", term_signal, " (", strsignal(term_signal), ")");
    return StrCat("exited with status ", exit_code);
  }
};

// Runs exe with argv (no shell) in `cwd`, stdin /dev/null, stdout and stderr
// into out_fd, in a new process group (all of which is killed at the time
// limit).
Result<ProcessResult> RunProcess(const std::string& exe, const std::vector<std::string>& args,
                                 const std::string& cwd, int out_fd, double timeout_s) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ChildEnv env;

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);  // none of the host's files leak in
#endif
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t mask;
  sigemptyset(&mask);
  posix_spawnattr_setsigmask(&attr, &mask);
  // Signals the host may ignore (ignored dispositions survive exec; an
  // ignored SIGCHLD would break the compiler driver's own waits).
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int s : {SIGCHLD, SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGALRM, SIGUSR1, SIGUSR2, SIGXFSZ})
    sigaddset(&defaults, s);
  posix_spawnattr_setsigdefault(&attr, &defaults);

  pid_t pid = -1;
  int rc = posix_spawn(&pid, exe.c_str(), &fa, &attr, argv.data(), env.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return Error(StatusCode::kIoError, "cannot run '", exe, "': ", Errno(rc));

  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(std::clamp(timeout_s, 0.0, 1e7)));
  int pidfd = -1;
#ifdef SYS_pidfd_open
  pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#endif
  ProcessResult res;
  int st = 0;
  Clock::duration backoff = std::chrono::microseconds(200);
  for (;;) {
    pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      if (pidfd >= 0) ::close(pidfd);
      ::kill(-pid, SIGKILL);
      return Error(StatusCode::kInternal, "lost the exit status of '", exe, "' (", Errno(e),
                   "; is SIGCHLD ignored in this process?)");
    }
    auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) {
      ::kill(-pid, SIGKILL);  // the whole group: driver, cc1plus, as, ld
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
      res.timed_out = true;
      break;
    }
    auto left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(left).count() + 1;
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(std::min<long long>(left_ms, 1000)));
    } else {
      std::this_thread::sleep_for(std::min<Clock::duration>(backoff, left));
      backoff = std::min<Clock::duration>(backoff * 2, std::chrono::milliseconds(10));
    }
  }
  if (pidfd >= 0) ::close(pidfd);
  if (!res.timed_out) {
    if (WIFEXITED(st)) res.exit_code = WEXITSTATUS(st);
    else if (WIFSIGNALED(st)) res.term_signal = WTERMSIG(st);
  }
  return res;
}

std::string ReadLog(int fd) {
  std::string log;
  std::uint64_t total = 0;
  if (!ReadFd(fd, kMaxLog, &log, &total)) return "(could not read the compiler's output)";
  if (total > log.size()) log += StrCat("\n... (log truncated: ", total, " bytes in all)\n");
  return log;
}

// ---- the compiler ----

struct Compiler {
  std::string path;     // absolute path that is executed
  std::string version;  // its `--version` output
  std::vector<std::string> base_flags;
};

Compiler MakeCompiler(std::string path, std::string version) {
  Compiler c{std::move(path), std::move(version), {std::begin(kBaseFlags), std::end(kBaseFlags)}};
  const bool gcc = c.version.find("Free Software Foundation") != std::string::npos &&
                   c.version.find("clang") == std::string::npos;
  if (gcc) c.base_flags.insert(c.base_flags.end(), std::begin(kGccFlags), std::end(kGccFlags));
  return c;
}

Result<std::string> ResolveCompilerPath() {
  std::string want = Getenv("KILN_RTC_CXX");
  const bool from_env = !want.empty();
  if (!from_env) want = "c++";
  auto usable = [](const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (want.find('/') != std::string::npos) {
    std::error_code ec;
    std::string abs = fs::absolute(want, ec).string();
    if (!ec && usable(abs)) return abs;
  } else {
    std::string path = Getenv("PATH");
    if (path.empty()) path = "/usr/local/bin:/usr/bin:/bin";
    std::size_t b = 0;
    while (b <= path.size()) {
      std::size_t e = path.find(':', b);
      if (e == std::string::npos) e = path.size();
      std::string dir = path.substr(b, e - b);
      if (dir.empty()) dir = ".";
      std::error_code ec;
      std::string cand = fs::absolute(fs::path(dir) / want, ec).string();
      if (!ec && usable(cand)) return cand;
      b = e + 1;
    }
  }
  if (from_env)
    return Error(StatusCode::kNotFound, "C++ compiler '", want,
                 "' (from KILN_RTC_CXX) not found or not executable; set KILN_RTC_CXX to a C++ compiler "
                 "(e.g. /usr/bin/g++) or unset it to use c++ on PATH");
  return Error(StatusCode::kNotFound,
               "no C++ compiler: 'c++' not found on PATH; install one (e.g. g++ or clang++) or set "
               "KILN_RTC_CXX to its path");
}

std::mutex& CompilerMemoMutex() {
  static std::mutex mu;
  return mu;
}
// compiler path -> (stat stamp, `--version` output)
std::map<std::string, std::pair<std::string, std::string>>& CompilerMemo() {
  static std::map<std::string, std::pair<std::string, std::string>> memo;
  return memo;
}

// `--version` is run once per compiler file (again when it changes: the
// stat stamp below) per cache directory, or per process without a cache.
Result<Compiler> FindCompiler(const std::string& cache_dir) {
  KILN_ASSIGN_OR_RETURN(std::string path, ResolveCompilerPath());
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return Error(StatusCode::kNotFound, "C++ compiler '", path, "' vanished: ", Errno());
  std::string stamp = StrCat(st.st_dev, ':', st.st_ino, ':', st.st_size, ':', st.st_mtim.tv_sec, '.',
                             st.st_mtim.tv_nsec);
  std::mutex& mu = CompilerMemoMutex();
  auto& memo = CompilerMemo();
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = memo.find(path);
    if (it != memo.end() && it->second.first == stamp) return MakeCompiler(path, it->second.second);
  }
  // The device, inode, size and mtime of what the path points to.
  const std::string id = path + "\n" + stamp;
  std::string disk_id;
  std::vector<std::uint8_t> disk_version;
  if (!cache_dir.empty() && ReadEntry(CompilerIdPath(cache_dir, path), &disk_id, &disk_version) && disk_id == id) {
    std::string version(disk_version.begin(), disk_version.end());
    std::lock_guard<std::mutex> lock(mu);
    memo[path] = {stamp, version};
    return MakeCompiler(path, version);
  }
  KILN_ASSIGN_OR_RETURN(Fd out, ScratchFile("kiln-rtc-version"));
  KILN_ASSIGN_OR_RETURN(ProcessResult r, RunProcess(path, {path, "--version"}, "", out.get(),
                                                    kVersionTimeoutSeconds));
  std::string version = ReadLog(out.get());
  if (r.timed_out || r.exit_code != 0)
    return Error(StatusCode::kInvalidArgument, "'", path, " --version' ", r.Describe(),
                 "; is it a C++ compiler? (set KILN_RTC_CXX)\n", version);
  while (!version.empty() && std::isspace(static_cast<unsigned char>(version.back()))) version.pop_back();
  if (!cache_dir.empty())
    (void)WriteEntry(cache_dir, CompilerIdPath(cache_dir, path), id, std::vector<std::uint8_t>(version.begin(), version.end()));
  std::lock_guard<std::mutex> lock(mu);
  memo[path] = {stamp, version};
  return MakeCompiler(path, version);
}

// ---- options ----

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

Status CheckFlag(const std::string& f) {
  auto reject = [&](std::string_view why) {
    return Error(StatusCode::kInvalidArgument, "compiler flag '", f, "' is not allowed", why,
                 " (allowed: -O*, -g*, -D<macro>, -U<macro>, -std=*, -f*, -m*, -W*, -w, -pedantic*, "
                 "-pthread, -l<lib>)");
  };
  if (f.find('\0') != std::string::npos) return reject(": it contains a NUL byte");
  if (f == "-I" || StartsWith(f, "-I") || StartsWith(f, "-isystem") || StartsWith(f, "-iquote") ||
      StartsWith(f, "-idirafter") || f == "-include")
    return reject(": include directories and files would not be part of the cache key; pass headers in "
                  "ProgramOptions::headers");
  if (f == "-D" || f == "-U") return reject(": join the macro to it (\"-DN=4\")");
  if (StartsWith(f, "-Wl,") || StartsWith(f, "-Wa,") || StartsWith(f, "-Wp,") || StartsWith(f, "-fplugin") ||
      StartsWith(f, "-fprofile") || StartsWith(f, "-fauto-profile") || StartsWith(f, "-fdump") ||
      f == "-fsyntax-only")
    return reject("");
  static constexpr std::string_view kExact[] = {"-w", "-pthread", "-pedantic", "-pedantic-errors"};
  for (auto e : kExact)
    if (f == e) return Status::Ok();
  static constexpr std::string_view kPrefixes[] = {"-O", "-g", "-D", "-U", "-std=", "-f", "-m", "-W"};
  for (auto p : kPrefixes)
    if (StartsWith(f, p)) return Status::Ok();
  if (StartsWith(f, "-l") && f.size() > 2 &&
      std::all_of(f.begin() + 2, f.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) ||
                                                              c == '_' || c == '.' || c == '+' || c == '-'; }))
    return Status::Ok();
  return reject("");
}

Status CheckHeaderName(const std::string& n) {
  auto bad = [&](std::string_view why) {
    return Error(StatusCode::kInvalidArgument, "header name '", n, "' ", why);
  };
  if (n.empty()) return bad("is empty");
  if (n.front() == '/') return bad("must be a relative path");
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '+' || c == '-' || c == '/'))
      return bad("may only contain letters, digits and \"_.+-/\"");
  std::size_t b = 0;
  while (b <= n.size()) {
    std::size_t e = n.find('/', b);
    if (e == std::string::npos) e = n.size();
    std::string_view part(n.data() + b, e - b);
    if (part.empty() || part == "." || part == "..") return bad("has an empty, '.' or '..' component");
    b = e + 1;
  }
  return Status::Ok();
}

std::string FileStem(const std::string& name) {
  std::string s = name.empty() ? "program" : name.substr(0, 64);
  for (char& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) c = '_';
  if (s.front() == '.' || s.front() == '-') s.insert(s.begin(), '_');
  return s;
}

// ---- the cache key ----

const std::string& HostArch() {
  static const std::string arch = [] {
    utsname u;
    return ::uname(&u) == 0 ? std::string(u.machine) : std::string("unknown");
  }();
  return arch;
}

// The CPU model and features, for -march=native and friends.
const std::string& CpuIdentity() {
  static const std::string id = [] {
    std::ifstream f("/proc/cpuinfo");
    std::string line, model, flags;
    while (std::getline(f, line) && (model.empty() || flags.empty())) {
      if (model.empty() && (StartsWith(line, "model name") || StartsWith(line, "CPU part"))) model = line;
      if (flags.empty() && (StartsWith(line, "flags") || StartsWith(line, "Features"))) flags = line;
    }
    return model + "\n" + flags;
  }();
  return id;
}

std::string CacheKey(const Compiler& cc, const std::string& stem, const std::string& source,
                     const ProgramOptions& o) {
  std::string k;
  auto field = [&k](std::string_view tag, std::string_view v) {
    k += tag;
    k += StrCat(':', v.size(), ':');
    k += v;
    k += '\n';
  };
  field("kiln-rtc", "1");
  field("compiler", cc.path);
  field("version", cc.version);
  field("arch", HostArch());
  for (const char* var : {"GCC_EXEC_PREFIX", "COMPILER_PATH", "LIBRARY_PATH"}) {
    const char* v = std::getenv(var);
    field(var, v ? StrCat("=", v) : std::string("unset"));
  }
  bool native = false;
  for (const std::string& f : cc.base_flags) field("base", f);
  for (const std::string& f : o.flags) {
    field("flag", f);
    native = native || f.find("native") != std::string::npos;
  }
  if (native) field("cpu", CpuIdentity());
  for (const Header& h : o.headers) {
    field("header", h.name);
    field("header-source", h.source);
  }
  field("name", stem);
  field("source", source);
  return weights::Sha256Hex(k.data(), k.size());
}

// ---- loading ----

// The main program's own ELF header (GNU ld and lld define it), to compare
// the machine type with.
extern "C" const ElfW(Ehdr) __ehdr_start __attribute__((weak, visibility("hidden")));

// dlopen trusts the file: a segment past the end of a truncated object is
// mapped anyway and the first touch is a SIGBUS. So check the headers first.
Status CheckElf(const std::vector<std::uint8_t>& b) {
  auto bad = [](auto&&... why) { return Error(StatusCode::kInvalidArgument, why...); };
  if (b.size() < sizeof(ElfW(Ehdr)) || std::memcmp(b.data(), ELFMAG, SELFMAG) != 0)
    return bad("not a shared object (", b.size(), " bytes without an ELF header)");
  ElfW(Ehdr) eh;
  std::memcpy(&eh, b.data(), sizeof(eh));
  const ElfW(Ehdr)* self = &__ehdr_start;
  if (self != nullptr && (std::memcmp(eh.e_ident, self->e_ident, EI_VERSION) != 0 || eh.e_machine != self->e_machine))
    return bad("an ELF object for another machine (class ", int(eh.e_ident[EI_CLASS]), ", data ",
               int(eh.e_ident[EI_DATA]), ", machine ", eh.e_machine, "; this process: ", int(self->e_ident[EI_CLASS]),
               ", ", int(self->e_ident[EI_DATA]), ", ", self->e_machine, ")");
  if (eh.e_type != ET_DYN) return bad("not a shared object (ELF type ", eh.e_type, ")");
  const std::uint64_t size = b.size();
  if (eh.e_phentsize != sizeof(ElfW(Phdr)) || eh.e_phnum == 0 || eh.e_phoff > size ||
      std::uint64_t{eh.e_phnum} * sizeof(ElfW(Phdr)) > size - eh.e_phoff)
    return bad("truncated or malformed ELF object (program headers outside its ", size, " bytes)");
  // Not needed to load, but a file cut short anywhere should not load.
  if (eh.e_shnum > 0 && (eh.e_shentsize != sizeof(ElfW(Shdr)) || eh.e_shoff > size ||
                         std::uint64_t{eh.e_shnum} * sizeof(ElfW(Shdr)) > size - eh.e_shoff))
    return bad("truncated or malformed ELF object (section headers outside its ", size, " bytes)");
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    ElfW(Phdr) ph;
    std::memcpy(&ph, b.data() + eh.e_phoff + i * sizeof(ElfW(Phdr)), sizeof(ph));
    if (ph.p_filesz > 0 && (ph.p_offset > size || ph.p_filesz > size - ph.p_offset))
      return bad("truncated ELF object: segment ", i, " needs bytes up to ", std::uint64_t{ph.p_offset} + ph.p_filesz,
                 ", it has ", size);
  }
  return Status::Ok();
}


// dlopen returns an already loaded object whose name matches instead of
// opening the file: true if `path` is such a name. /proc/self/fd/N numbers
// are reused, and an object can stay mapped under its old name after its
// last dlclose (while a thread_local destructor of it is pending, or with
// STB_GNU_UNIQUE symbols: never unloaded).
bool NameTaken(const std::string& path) {
  void* h = ::dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (h == nullptr) return false;
  ::dlclose(h);
  return true;
}

std::string DlError() {
  const char* e = ::dlerror();
  return e ? e : "unknown dlopen error";
}

// Through a memfd: nothing touches the disk, and no noexec mount is in the way.
Result<void*> OpenViaMemfd(const std::vector<std::uint8_t>& binary, const std::string& name) {
  Fd fd(::memfd_create(("kiln-rtc:" + FileStem(name)).c_str(), MFD_CLOEXEC));
  if (fd.get() < 0) return Error(StatusCode::kIoError, "memfd_create: ", Errno());
  if (!WriteAll(fd.get(), binary.data(), binary.size()))
    return Error(StatusCode::kIoError, "writing the memfd: ", Errno());
  std::vector<Fd> spare;  // kept open until dlopen so each retry gets a new number
  std::string path = StrCat("/proc/self/fd/", fd.get());
  for (int tries = 0; NameTaken(path); ++tries) {
    int again = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, 0);
    if (again < 0 || tries > 64) return Error(StatusCode::kIoError, "no unused /proc/self/fd name");
    spare.push_back(std::move(fd));
    fd = Fd(again);
    path = StrCat("/proc/self/fd/", fd.get());
  }
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    std::string err = DlError();
    // Where memfds may not be mapped executable (vm.memfd_noexec, seccomp)
    // or /proc is missing, the caller falls back to a temporary file.
    StatusCode code = err.find("failed to map segment") != std::string::npos ||
                              err.find("cannot open shared object") != std::string::npos
                          ? StatusCode::kIoError
                          : StatusCode::kInvalidArgument;
    if (StartsWith(err, path + ": ")) err.erase(0, path.size() + 2);  // the fd path means nothing to a reader
    return Error(code, err);
  }
  return h;  // the mapping outlives the descriptor
}

// Through a temporary file with a process-unique name, unlinked at once.
Result<void*> OpenViaTempFile(const std::vector<std::uint8_t>& binary, const std::string& name) {
  static std::atomic<std::uint64_t> counter{0};
  std::error_code ec;
  fs::path dir = fs::temp_directory_path(ec);
  for (int tries = 0;; ++tries) {
    std::string path = ((ec ? fs::path("/tmp") : dir) /
                        StrCat("kiln_rtc_", ::getpid(), "_", counter++, "_XXXXXX.so")).string();
    Fd fd(::mkostemps(path.data(), 3, O_CLOEXEC));
    if (fd.get() < 0) return Error(StatusCode::kIoError, "cannot create ", path, ": ", Errno());
    bool ok = WriteAll(fd.get(), binary.data(), binary.size());
    fd.reset();
    if (!ok) {
      ::unlink(path.c_str());
      return Error(StatusCode::kIoError, "cannot write ", path, ": ", Errno());
    }
    if (NameTaken(path) && tries < 16) {
      ::unlink(path.c_str());
      continue;
    }
    void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    std::string err = h ? "" : DlError();
    if (StartsWith(err, path + ": ")) err.erase(0, path.size() + 2);
    ::unlink(path.c_str());
    if (h == nullptr) return Error(StatusCode::kInvalidArgument, err);
    return h;
  }
}

}  // namespace

// ---- Program ----

Program::Program(std::string name, std::string source, ProgramOptions options)
    : name_(name.empty() ? "program" : std::move(name)),
      file_stem_(FileStem(name_)),
      source_(std::move(source)),
      options_(std::move(options)) {}

Result<std::unique_ptr<Program>> Program::Create(std::string name, std::string source,
                                                 ProgramOptions options) {
  const std::string label = name.empty() ? "program" : name;
  for (const std::string& f : options.flags)
    KILN_RETURN_IF_ERROR(CheckFlag(f).WithContext(StrCat("RTC program '", label, "'")));
  for (std::size_t i = 0; i < options.headers.size(); ++i) {
    KILN_RETURN_IF_ERROR(CheckHeaderName(options.headers[i].name).WithContext(StrCat("RTC program '", label, "'")));
    for (std::size_t j = 0; j < i; ++j)
      if (options.headers[j].name == options.headers[i].name)
        return Error(StatusCode::kInvalidArgument, "RTC program '", label, "': header '",
                     options.headers[i].name, "' given twice");
  }
  if (!(options.timeout_seconds > 0))
    return Error(StatusCode::kInvalidArgument, "RTC program '", label, "': timeout_seconds must be > 0, got ",
                 options.timeout_seconds);
  return std::unique_ptr<Program>(new Program(std::move(name), std::move(source), std::move(options)));
}

Status Program::Compile() {
  if (compiled_) return Status::Ok();
  const std::string what = StrCat("RTC program '", name_, "'");
  log_.clear();
  from_cache_ = false;
  const std::string cache_dir = options_.use_cache ? CacheDirectory() : "";
  Result<Compiler> found = FindCompiler(cache_dir);
  if (!found.ok()) return found.status().WithContext(what);
  const Compiler& cc = found.value();
  key_ = CacheKey(cc, file_stem_, source_, options_);

  if (!cache_dir.empty() && ReadEntry(EntryPath(cache_dir, key_), &log_, &binary_)) {
    ++Stats().hits;
    compiled_ = from_cache_ = true;
    return Status::Ok();
  }

  // Compile in a private directory: <stem>.cc, inc/<headers>, -> <stem>.so.
  Result<std::unique_ptr<TempDir>> made = TempDir::Create();
  if (!made.ok()) return made.status().WithContext(what);
  std::unique_ptr<TempDir> tmp = std::move(made).value();
  const std::string src = file_stem_ + ".cc", out = file_stem_ + ".so";
  KILN_RETURN_IF_ERROR(WriteFile(tmp->path() + "/" + src, source_).WithContext(what));
  std::vector<std::string> args = {cc.path};
  args.insert(args.end(), cc.base_flags.begin(), cc.base_flags.end());
  if (!options_.headers.empty()) {
    for (const Header& h : options_.headers) {
      fs::path p = fs::path(tmp->path()) / "inc" / h.name;
      std::error_code ec;
      fs::create_directories(p.parent_path(), ec);
      KILN_RETURN_IF_ERROR(WriteFile(p.string(), h.source).WithContext(what));
    }
    args.push_back("-Iinc");
  }
  args.insert(args.end(), options_.flags.begin(), options_.flags.end());
  args.insert(args.end(), {"-o", out, src});

  Result<Fd> scratch = ScratchFile("kiln-rtc-log");
  if (!scratch.ok()) return scratch.status().WithContext(what);
  Fd log_fd = std::move(scratch).value();
  ++Stats().compiles;
  Result<ProcessResult> run = RunProcess(cc.path, args, tmp->path(), log_fd.get(), options_.timeout_seconds);
  if (!run.ok()) {
    ++Stats().failed_compiles;
    return run.status().WithContext(what);
  }
  log_ = ReadLog(log_fd.get());
  const ProcessResult& r = run.value();
  if (r.timed_out) {
    ++Stats().failed_compiles;
    return Error(StatusCode::kInvalidArgument, what, ": the compiler did not finish within the time limit of ",
                 options_.timeout_seconds, " s (ProgramOptions::timeout_seconds) and was killed; its output:\n",
                 log_);
  }
  if (r.exit_code != 0) {
    ++Stats().failed_compiles;
    return Error(StatusCode::kInvalidArgument, what, " failed to compile (", cc.path, " ", r.Describe(),
                 "):\n", log_);
  }
  std::string so;
  {
    Fd fd(::open((tmp->path() + "/" + out).c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0 || !ReadFd(fd.get(), std::size_t{1} << 32, &so)) {
      ++Stats().failed_compiles;
      return Error(StatusCode::kInternal, what, ": the compiler exited 0 but wrote no ", out, "\n", log_);
    }
  }
  binary_.assign(so.begin(), so.end());
  compiled_ = true;
  if (!cache_dir.empty() && !WriteEntry(cache_dir, EntryPath(cache_dir, key_), log_, binary_)) ++Stats().store_failures;
  return Status::Ok();
}

Result<std::vector<std::uint8_t>> Program::Binary() const {
  if (!compiled_)
    return Error(StatusCode::kInvalidArgument, "RTC program '", name_, "' is not compiled (call Compile first)");
  return binary_;
}

// ---- Module ----

Module::Module(void* handle, std::string name) : handle_(handle), name_(std::move(name)) {}

Module::~Module() {
  if (handle_ != nullptr) ::dlclose(handle_);
}

Result<std::shared_ptr<Module>> Module::Load(const Program& program) {
  if (!program.compiled_)
    return Error(StatusCode::kInvalidArgument, "RTC program '", program.name_,
                 "' is not compiled (call Compile first)");
  return LoadBinary(program.binary_, program.name_);
}

Result<std::shared_ptr<Module>> Module::LoadBinary(const std::vector<std::uint8_t>& binary, std::string name) {
  KILN_RETURN_IF_ERROR(CheckElf(binary).WithContext(StrCat("RTC module '", name, "'")));
  Result<void*> h = OpenViaMemfd(binary, name);
  if (!h.ok() && h.status().code() == StatusCode::kIoError) {  // memfd unusable here
    Result<void*> h2 = OpenViaTempFile(binary, name);
    if (!h2.ok())
      return Error(h2.status().code(), "RTC module '", name, "': cannot load: ", h2.status().message(),
                   " (from a memfd: ", h.status().message(), ")");
    h = std::move(h2);
  }
  if (!h.ok()) return Error(StatusCode::kInvalidArgument, "RTC module '", name, "': cannot load: ", h.status().message());
  return std::shared_ptr<Module>(new Module(h.value(), std::move(name)));
}

Result<void*> Module::Function(const std::string& symbol) const {
  ::dlerror();
  void* p = ::dlsym(handle_, symbol.c_str());
  if (p == nullptr)
    return Error(StatusCode::kNotFound, "RTC module '", name_, "': symbol '", symbol,
                 "' not found (C++ functions need extern \"C\" to be found by their plain name)");
  // dlsym also searches the libraries the object depends on (libc, ...).
  link_map* own = nullptr;
  link_map* where = nullptr;
  Dl_info info;
  if (::dlinfo(handle_, RTLD_DI_LINKMAP, &own) == 0 &&
      ::dladdr1(p, &info, reinterpret_cast<void**>(&where), RTLD_DL_LINKMAP) != 0 && where != nullptr &&
      own != nullptr && where != own)
    return Error(StatusCode::kNotFound, "RTC module '", name_, "': symbol '", symbol,
                 "' is not defined in the module (it resolves in ",
                 where->l_name && *where->l_name ? where->l_name : "the main program", ")");
  return p;
}

void internal::ForgetCompilersForTesting() {
  std::lock_guard<std::mutex> lock(CompilerMemoMutex());
  CompilerMemo().clear();
}

CacheStats GetCacheStats() {
  Counters& c = Stats();
  return {c.compiles.load(), c.hits.load(), c.failed_compiles.load(), c.corrupt.load(), c.store_failures.load()};
}

std::string CacheDirectory() {
  std::string d = Getenv("KILN_RTC_CACHE_DIR");
  if (!d.empty()) return d;
  std::string xdg = Getenv("XDG_CACHE_HOME");
  if (!xdg.empty() && xdg.front() == '/') return xdg + "/kiln/rtc";  // XDG: relative values are ignored
  std::string home = Getenv("HOME");
  if (home.empty()) {
    std::vector<char> buf(16384);
    passwd pw, *res = nullptr;
    if (::getpwuid_r(::geteuid(), &pw, buf.data(), buf.size(), &res) == 0 && res && res->pw_dir)
      home = res->pw_dir;
  }
  if (home.empty()) return "";
  return home + "/.cache/kiln/rtc";
}

}  // namespace kiln::rtc
