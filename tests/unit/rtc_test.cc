// Runtime kernel compilation (CPU): compile, cache, load, errors.
#include "kiln/rtc.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <thread>

#include "rtc/cpu_rtc_internal.h"
#include "test_util.h"

namespace kiln::rtc {
namespace {

namespace fs = std::filesystem;

using AddFn = void(const float*, const float*, float*, long);

const char* kAddSource = R"(
#ifndef SCALE
#define SCALE 1
#endif
extern "C" void add(const float* a, const float* b, float* c, long n) {
  for (long i = 0; i < n; ++i) c[i] = SCALE * (a[i] + b[i]);
}
)";

std::string ReadText(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

void WriteScript(const std::string& path, const std::string& body) {
  std::ofstream(path) << "#!/bin/sh\n" << body;
  fs::permissions(path, fs::perms::owner_all);
}

// Sets an environment variable for the test's lifetime, restoring it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_.c_str(), old_->c_str(), 1);
    else unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

class RtcTest : public ::testing::Test {
 protected:
  // A compiled and loaded program, failing the test on any error.
  std::shared_ptr<Module> Build(const std::string& name, const std::string& source, ProgramOptions o = {},
                                std::unique_ptr<Program>* keep = nullptr) {
    auto p = Program::Create(name, source, std::move(o));
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    if (!p.ok()) return nullptr;
    Status s = (*p)->Compile();
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok()) return nullptr;
    auto m = Module::Load(**p);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    if (keep) *keep = std::move(p.value());
    return m.ok() ? m.value() : nullptr;
  }
  // The cache's program entries; fails the test if a temporary is left.
  std::vector<std::string> CacheFiles() const {
    std::vector<std::string> out;
    for (auto& e : fs::directory_iterator(cache_)) {
      const std::string p = e.path().string();
      EXPECT_EQ(p.find(".tmp."), std::string::npos) << p;
      if (e.path().extension() == ".rtc") out.push_back(p);
    }
    return out;
  }

  test::TempDir dir_;
  std::string cache_ = dir_.file("cache");
  ScopedEnv cache_env_{"KILN_RTC_CACHE_DIR", cache_.c_str()};
  ScopedEnv cxx_env_{"KILN_RTC_CXX", nullptr};
};

TEST_F(RtcTest, CompilesAndRunsAddKernel) {
  const CacheStats before = GetCacheStats();
  std::unique_ptr<Program> prog;
  auto mod = Build("add", kAddSource, {}, &prog);
  ASSERT_TRUE(mod);
  EXPECT_FALSE(prog->from_cache());
  EXPECT_EQ(prog->cache_key().size(), 64u);
  EXPECT_EQ(GetCacheStats().compiles, before.compiles + 1);
  auto add = mod->FunctionAs<AddFn>("add");
  ASSERT_TRUE(add.ok()) << add.status().ToString();
  const float a[5] = {1, 2, 3, 4, 5}, b[5] = {10, 20, 30, 40, -5};
  float c[5] = {0, 0, 0, 0, 0};
  (*add)(a, b, c, 5);
  EXPECT_EQ(std::vector<float>(c, c + 5), (std::vector<float>{11, 22, 33, 44, 0}));
  auto bin = prog->Binary();
  ASSERT_TRUE(bin.ok());
  EXPECT_GT(bin->size(), 64u);
  EXPECT_EQ(CacheFiles().size(), 1u);
  struct stat st;
  ASSERT_EQ(stat(cache_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

// The second program with the same source and flags is served by the disk
// cache: no compiler process at all (the wrapper logs every invocation), the
// same binary, and the first compile's warnings.
TEST_F(RtcTest, SecondProgramIsCacheHitWithoutRunningCompiler) {
  const std::string calls = dir_.file("calls.txt"), cxx = dir_.file("cxx.sh");
  WriteScript(cxx, "echo \"$*\" >> '" + calls + "'\nexec c++ \"$@\"\n");
  ScopedEnv env("KILN_RTC_CXX", cxx.c_str());
  const std::string source = std::string(kAddSource) + "extern \"C\" int unused_warning() { int x; return 0; }\n";
  ProgramOptions o;
  o.flags = {"-O3", "-Wall"};

  const CacheStats s0 = GetCacheStats();
  auto t0 = std::chrono::steady_clock::now();
  auto p1 = Program::Create("add", source, o);
  ASSERT_TRUE(p1.ok());
  ASSERT_TRUE((*p1)->Compile().ok()) << (*p1)->log();
  auto t1 = std::chrono::steady_clock::now();
  EXPECT_FALSE((*p1)->from_cache());
  EXPECT_NE((*p1)->log().find("warning"), std::string::npos) << (*p1)->log();
  const std::string calls_after_first = ReadText(calls);
  EXPECT_NE(calls_after_first.find("add.cc"), std::string::npos) << calls_after_first;
  const CacheStats s1 = GetCacheStats();
  EXPECT_EQ(s1.compiles, s0.compiles + 1);

  auto t2 = std::chrono::steady_clock::now();
  auto p2 = Program::Create("add", source, o);
  ASSERT_TRUE(p2.ok());
  ASSERT_TRUE((*p2)->Compile().ok());
  auto t3 = std::chrono::steady_clock::now();
  EXPECT_TRUE((*p2)->from_cache());
  const CacheStats s2 = GetCacheStats();
  EXPECT_EQ(s2.compiles, s1.compiles);
  EXPECT_EQ(s2.hits, s1.hits + 1);
  EXPECT_EQ(ReadText(calls), calls_after_first) << "a compiler process ran on a cache hit";
  EXPECT_EQ((*p2)->cache_key(), (*p1)->cache_key());
  EXPECT_EQ((*p2)->log(), (*p1)->log());
  EXPECT_EQ((*p2)->Binary().value(), (*p1)->Binary().value());

  auto mod = Module::Load(**p2);
  ASSERT_TRUE(mod.ok()) << mod.status().ToString();
  auto add = (*mod)->FunctionAs<AddFn>("add");
  ASSERT_TRUE(add.ok());
  const float a[3] = {1, 2, 3}, b[3] = {0.5f, 0.25f, -3};
  float c[3] = {};
  (*add)(a, b, c, 3);
  EXPECT_EQ(std::vector<float>(c, c + 3), (std::vector<float>{1.5f, 2.25f, 0}));

  using ms = std::chrono::duration<double, std::milli>;
  std::printf("[rtc] first compile %.1f ms, cache hit %.3f ms\n", ms(t1 - t0).count(), ms(t3 - t2).count());
}

// A new process finds the compiler's `--version` in the cache too (keyed by
// the compiler file's stat), so its first hit runs no process either; a
// changed compiler file is asked again.
TEST_F(RtcTest, FreshProcessHitRunsNoProcessUntilTheCompilerChanges) {
  const std::string calls = dir_.file("calls.txt"), cxx = dir_.file("cxx.sh");
  WriteScript(cxx, "echo \"$*\" >> '" + calls + "'\nexec c++ \"$@\"\n");
  ScopedEnv env("KILN_RTC_CXX", cxx.c_str());
  std::unique_ptr<Program> p1, p2, p3;
  ASSERT_TRUE(Build("add", kAddSource, {}, &p1));
  const std::string after_first = ReadText(calls);
  EXPECT_NE(after_first.find("--version"), std::string::npos);

  internal::ForgetCompilersForTesting();  // as in a new process
  ASSERT_TRUE(Build("add", kAddSource, {}, &p2));
  EXPECT_TRUE(p2->from_cache());
  EXPECT_EQ(ReadText(calls), after_first);

  // Touch the compiler: `--version` runs again; same output, same key, a hit.
  fs::last_write_time(cxx, fs::last_write_time(cxx) + std::chrono::seconds(5));
  internal::ForgetCompilersForTesting();
  ASSERT_TRUE(Build("add", kAddSource, {}, &p3));
  EXPECT_TRUE(p3->from_cache());
  EXPECT_EQ(p3->cache_key(), p1->cache_key());
  EXPECT_EQ(ReadText(calls), after_first + "--version\n");
}

TEST_F(RtcTest, DifferentFlagsSourceOrHeadersGiveDifferentKeys) {
  std::unique_ptr<Program> plain, scaled;
  ProgramOptions o;
  o.flags = {"-DSCALE=2"};
  auto m1 = Build("add", kAddSource, {}, &plain);
  const CacheStats s = GetCacheStats();
  auto m2 = Build("add", kAddSource, o, &scaled);
  ASSERT_TRUE(m1 && m2);
  EXPECT_NE(plain->cache_key(), scaled->cache_key());
  EXPECT_FALSE(scaled->from_cache());
  EXPECT_EQ(GetCacheStats().compiles, s.compiles + 1);
  EXPECT_EQ(CacheFiles().size(), 2u);
  const float a[2] = {1, 2}, b[2] = {3, 4};
  float c1[2], c2[2];
  m1->FunctionAs<AddFn>("add").value()(a, b, c1, 2);
  m2->FunctionAs<AddFn>("add").value()(a, b, c2, 2);
  EXPECT_EQ(std::vector<float>(c1, c1 + 2), (std::vector<float>{4, 6}));
  EXPECT_EQ(std::vector<float>(c2, c2 + 2), (std::vector<float>{8, 12}));

  // A header is part of the key; it is found as "name" and <name>.
  auto keyed = [&](const std::string& header_source) {
    ProgramOptions ho;
    ho.headers = {{"kiln/scale.h", header_source}};
    std::unique_ptr<Program> p;
    auto m = Build("hdr", "#include \"kiln/scale.h\"\n#include <kiln/scale.h>\n"
                          "extern \"C\" int scale() { return SCALE_BY; }\n", ho, &p);
    EXPECT_TRUE(m);
    if (!m) return std::make_pair(std::string(), 0);
    return std::make_pair(p->cache_key(), m->FunctionAs<int()>("scale").value()());
  };
  auto h3 = keyed("#pragma once\n#define SCALE_BY 3\n");
  auto h7 = keyed("#pragma once\n#define SCALE_BY 7\n");
  EXPECT_EQ(h3.second, 3);
  EXPECT_EQ(h7.second, 7);
  EXPECT_NE(h3.first, h7.first);
}

TEST_F(RtcTest, SyntaxErrorReturnsCompilerLog) {
  auto p = Program::Create("broken", "extern \"C\" void f( { return 1 }\n");
  ASSERT_TRUE(p.ok());
  const CacheStats s = GetCacheStats();
  Status st = (*p)->Compile();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("broken"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("error"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("broken.cc:1"), std::string::npos) << st.message();  // the log, by file name
  EXPECT_NE((*p)->log().find("error"), std::string::npos);
  EXPECT_FALSE((*p)->compiled());
  EXPECT_FALSE((*p)->Binary().ok());
  EXPECT_FALSE(Module::Load(**p).ok());
  EXPECT_EQ(GetCacheStats().failed_compiles, s.failed_compiles + 1);
  if (fs::exists(cache_)) {
    EXPECT_TRUE(CacheFiles().empty()) << "a failed compile was cached";
  }
}

TEST_F(RtcTest, MissingSymbolIsNotFoundNamingIt) {
  auto mod = Build("add", kAddSource);
  ASSERT_TRUE(mod);
  auto f = mod->Function("subtract");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find("'subtract'"), std::string::npos) << f.status().message();
  EXPECT_NE(f.status().message().find("'add'"), std::string::npos) << f.status().message();
  // Found by dlsym in libc (a dependency), but not defined in the module.
  auto hello = Build("hello", "#include <cstdio>\nextern \"C\" void hello() { std::puts(\"hi\"); }\n");
  ASSERT_TRUE(hello);
  EXPECT_TRUE(hello->Function("hello").ok());
  auto m = hello->Function("puts");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("not defined in the module"), std::string::npos) << m.status().message();
}

TEST_F(RtcTest, MissingCompilerIsClearError) {
  {
    ScopedEnv env("KILN_RTC_CXX", "/nonexistent/kiln-cxx");
    auto p = Program::Create("add", kAddSource);
    ASSERT_TRUE(p.ok());
    Status s = (*p)->Compile();
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kNotFound);
    EXPECT_NE(s.message().find("/nonexistent/kiln-cxx"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("KILN_RTC_CXX"), std::string::npos) << s.message();
  }
  {
    ScopedEnv path("PATH", dir_.file("empty").c_str());
    auto p = Program::Create("add", kAddSource);
    Status s = (*p)->Compile();
    EXPECT_EQ(s.code(), StatusCode::kNotFound);
    EXPECT_NE(s.message().find("'c++' not found on PATH"), std::string::npos) << s.message();
  }
  {
    // Something that is not a compiler: `--version` fails.
    const std::string fake = dir_.file("notcxx.sh");
    WriteScript(fake, "echo 'no such option' >&2\nexit 3\n");
    ScopedEnv env("KILN_RTC_CXX", fake.c_str());
    auto p = Program::Create("add", kAddSource);
    Status s = (*p)->Compile();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("--version"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("no such option"), std::string::npos) << s.message();
  }
}

TEST_F(RtcTest, DisallowedFlagsAndHeadersAreRejected) {
  for (const char* f : {"-o", "/tmp/x.so", "-c", "-E", "-x", "-I/usr/include", "-isystem/x", "-include",
                        "@flags.txt", "-Wl,-rpath,/x", "-fplugin=/x.so", "-fprofile-use=/x", "-B/x",
                        "--sysroot=/x", "-D", "-shared-libgcc-x", "main.cc", "-l/etc/passwd"}) {
    ProgramOptions o;
    o.flags = {"-O3", f};
    auto p = Program::Create("k", kAddSource, o);
    ASSERT_FALSE(p.ok()) << f;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find(std::string("'") + f + "'"), std::string::npos) << p.status().message();
  }
  for (const char* f : {"-O3", "-Ofast", "-DN=4", "-UNDEBUG", "-std=c++17", "-ffast-math", "-march=native",
                        "-Wall", "-Werror", "-w", "-g", "-pthread", "-lm", "-fopenmp"}) {
    ProgramOptions o;
    o.flags = {f};
    EXPECT_TRUE(Program::Create("k", kAddSource, o).ok()) << f;
  }
  for (const char* h : {"", "/abs.h", "../up.h", "a//b.h", "a/./b.h", "sp ace.h"}) {
    ProgramOptions o;
    o.headers = {{h, ""}};
    auto p = Program::Create("k", kAddSource, o);
    EXPECT_FALSE(p.ok()) << h;
  }
  ProgramOptions twice;
  twice.headers = {{"a.h", ""}, {"a.h", ""}};
  EXPECT_FALSE(Program::Create("k", kAddSource, twice).ok());
}

TEST_F(RtcTest, DamagedCacheEntryIsRecompiledAndReplaced) {
  std::unique_ptr<Program> first;
  ASSERT_TRUE(Build("add", kAddSource, {}, &first));
  auto files = CacheFiles();
  ASSERT_EQ(files.size(), 1u);
  {
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(200);
    char c = static_cast<char>(f.get());
    f.seekp(200);
    f.put(static_cast<char>(~c));
  }
  const CacheStats s = GetCacheStats();
  std::unique_ptr<Program> second;
  auto mod = Build("add", kAddSource, {}, &second);
  ASSERT_TRUE(mod);
  EXPECT_FALSE(second->from_cache());
  const CacheStats s2 = GetCacheStats();
  EXPECT_EQ(s2.corrupt_entries, s.corrupt_entries + 1);
  EXPECT_EQ(s2.compiles, s.compiles + 1);
  std::unique_ptr<Program> third;
  ASSERT_TRUE(Build("add", kAddSource, {}, &third));
  EXPECT_TRUE(third->from_cache());

  // Truncated: same.
  fs::resize_file(files[0], 50);
  std::unique_ptr<Program> fourth;
  ASSERT_TRUE(Build("add", kAddSource, {}, &fourth));
  EXPECT_FALSE(fourth->from_cache());
}

TEST_F(RtcTest, UnwritableCacheStillCompiles) {
  ScopedEnv env("KILN_RTC_CACHE_DIR", "/proc/kiln-no-such-dir");
  const CacheStats s = GetCacheStats();
  auto mod = Build("add", kAddSource);
  ASSERT_TRUE(mod);
  EXPECT_EQ(GetCacheStats().store_failures, s.store_failures + 1);
  ProgramOptions no_cache;
  no_cache.use_cache = false;
  std::unique_ptr<Program> p;
  ASSERT_TRUE(Build("add", kAddSource, no_cache, &p));
  EXPECT_FALSE(p->from_cache());
}

TEST_F(RtcTest, LoadBinaryRoundTripAndGarbage) {
  std::unique_ptr<Program> prog;
  ASSERT_TRUE(Build("add", kAddSource, {}, &prog));
  auto mod = Module::LoadBinary(prog->Binary().value(), "saved");
  ASSERT_TRUE(mod.ok()) << mod.status().ToString();
  float c[1];
  const float a[1] = {2}, b[1] = {3};
  (*mod)->FunctionAs<AddFn>("add").value()(a, b, c, 1);
  EXPECT_EQ(c[0], 5);

  auto garbage = Module::LoadBinary(std::vector<std::uint8_t>(100, 7), "junk");
  ASSERT_FALSE(garbage.ok());
  EXPECT_EQ(garbage.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(garbage.status().message().find("junk"), std::string::npos);
  // Truncated anywhere: an error, not a SIGBUS inside dlopen.
  const std::vector<std::uint8_t> whole = prog->Binary().value();
  for (std::size_t cut : {std::size_t{0}, std::size_t{63}, std::size_t{64}, std::size_t{200}, whole.size() / 3,
                          whole.size() / 2, whole.size() - 1}) {
    std::vector<std::uint8_t> truncated(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(cut));
    auto t = Module::LoadBinary(truncated, "cut");
    ASSERT_FALSE(t.ok()) << cut;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  }
  std::vector<std::uint8_t> other_machine = whole;
  other_machine[18] ^= 0x55;  // e_machine
  auto om = Module::LoadBinary(other_machine, "arm?");
  ASSERT_FALSE(om.ok());
  EXPECT_NE(om.status().message().find("another machine"), std::string::npos) << om.status().message();

  // An object with an undefined symbol fails at load (RTLD_NOW), with dlerror's text.
  auto undef = Program::Create("undef", "extern \"C\" int missing_fn(); extern \"C\" int g() { return missing_fn(); }");
  ASSERT_TRUE((*undef)->Compile().ok()) << (*undef)->log();
  auto m = Module::Load(**undef);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("missing_fn"), std::string::npos) << m.status().message();
  EXPECT_EQ(m.status().message().find("/proc/self/fd"), std::string::npos) << m.status().message();
}

// Every Load is an independent instance (its own statics, even those of
// inline functions, which GCC would otherwise make process-wide
// STB_GNU_UNIQUE symbols), and a module loaded after another was unloaded
// gets its own code although dlopen matches loaded objects by name: here the
// thread_local with a destructor keeps each object mapped after dlclose
// while this thread lives, under its /proc/self/fd/N name, and fd numbers
// are reused.
TEST_F(RtcTest, LoadsAreIndependentAndNamesAreNotConfused) {
  auto source = [](int v) {
    return StrCat("inline int& counter() { static int c = 0; return c; }\n",
                  "struct Tls { ~Tls() { ++counter(); } int n = 0; };\n",
                  "thread_local Tls tls;\n",
                  "extern \"C\" int bump() { ++tls.n; int c = ++counter(); return ", v, " * 1000 + c; }\n");
  };
  std::unique_ptr<Program> p1;
  auto a = Build("v1", source(1), {}, &p1);
  ASSERT_TRUE(a);
  auto b = Module::Load(*p1);
  ASSERT_TRUE(b.ok());
  auto bump_a = a->FunctionAs<int()>("bump").value();
  auto bump_b = (*b)->FunctionAs<int()>("bump").value();
  EXPECT_EQ(bump_a(), 1001);
  EXPECT_EQ(bump_a(), 1002);
  EXPECT_EQ(bump_b(), 1001);  // its own static
  a.reset();
  b->reset();
  for (int v = 2; v <= 4; ++v) {
    auto m = Build(StrCat("v", v), source(v));
    ASSERT_TRUE(m);
    EXPECT_EQ(m->FunctionAs<int()>("bump").value()(), v * 1000 + 1) << v;
  }
}

TEST_F(RtcTest, TimeLimitKillsTheCompilerAndItsChildren) {
  const std::string pidfile = dir_.file("child.pid"), cxx = dir_.file("slow.sh");
  WriteScript(cxx, "if [ \"$1\" = --version ]; then echo slowcc 1.0; exit 0; fi\n"
                   "echo compiling...\nsleep 30 &\necho $! > '" + pidfile + "'\nwait\n");
  ScopedEnv env("KILN_RTC_CXX", cxx.c_str());
  ProgramOptions o;
  o.timeout_seconds = 3;  // room for the script to start on a loaded machine
  auto p = Program::Create("slow", kAddSource, o);
  ASSERT_TRUE(p.ok());
  auto t0 = std::chrono::steady_clock::now();
  Status s = (*p)->Compile();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(s.ok());
  EXPECT_GE(secs, 2.9);
  EXPECT_LT(secs, 20);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("time limit"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("compiling..."), std::string::npos) << s.message();
  // The grandchild (sleep) was killed with the group: gone or a zombie.
  pid_t child = std::atoi(ReadText(pidfile).c_str());
  ASSERT_GT(child, 0);
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    std::string stat = ReadText(StrCat("/proc/", child, "/stat"));
    gone = stat.empty() || stat.find(") Z") != std::string::npos;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone) << "sleep " << child << " survived the time limit";
}

TEST_F(RtcTest, ConcurrentCompilesOfTheSameProgram) {
  std::vector<std::thread> threads;
  std::vector<int> results(2, -1);
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      auto p = Program::Create("same", "extern \"C\" int f() { return 42; }");
      if (!p.ok() || !(*p)->Compile().ok()) return;
      auto m = Module::Load(**p);
      if (m.ok()) results[t] = (*m)->FunctionAs<int()>("f").value()();
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(results, (std::vector<int>{42, 42}));
  auto files = CacheFiles();
  ASSERT_EQ(files.size(), 1u);  // no temporaries left behind
  std::unique_ptr<Program> again;
  ASSERT_TRUE(Build("same", "extern \"C\" int f() { return 42; }", {}, &again));
  EXPECT_TRUE(again->from_cache());
}

}  // namespace
}  // namespace kiln::rtc
