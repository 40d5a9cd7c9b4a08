/* libgradcomp.so's contract, checked from C: it loads with RTLD_NOW in a
 * process without NCCL (no undefined NCCL symbols, no DT_NEEDED on libnccl),
 * it exports exactly the interposed NCCL entry points, ncclNetPlugin_v6..v11,
 * ncclCollNetPlugin_v6..v12 and ncclTunerPlugin_v3..v6 (`nm -D
 * --defined-only`), and every plugin table carries the name "gradcomp" (the
 * net plugin's is what NCCL_NET=gradcomp selects). Usage: test_exports path/to/libgradcomp.so */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char* const kExpected[] = {
    "ncclAllReduce",        "ncclCommInitRank",      "ncclCommInitRankConfig",
    "ncclCommInitRankScalable", "ncclCommInitAll",   "ncclCommSplit",
    "ncclCommShrink",       "ncclCommFinalize",      "ncclCommDestroy",
    "ncclCommAbort",        "ncclCommGetAsyncError", "ncclGetLastError",
    "ncclGroupStart",       "ncclGroupEnd",          "ncclNetPlugin_v6",
    "ncclNetPlugin_v7",     "ncclNetPlugin_v8",      "ncclNetPlugin_v9",
    "ncclNetPlugin_v10",    "ncclNetPlugin_v11",     "ncclCollNetPlugin_v6",
    "ncclCollNetPlugin_v7", "ncclCollNetPlugin_v8",  "ncclCollNetPlugin_v9",
    "ncclCollNetPlugin_v10", "ncclCollNetPlugin_v11", "ncclCollNetPlugin_v12",
    "ncclTunerPlugin_v3",   "ncclTunerPlugin_v4",    "ncclTunerPlugin_v5",
    "ncclTunerPlugin_v6",   "ncclReduceScatter",     "ncclAllGather",
};
#define N_EXPECTED (sizeof kExpected / sizeof kExpected[0])

static int failures = 0;
#define FAIL(...) do { fprintf(stderr, "FAIL: " __VA_ARGS__); fputc('\n', stderr); ++failures; } while (0)

static int expected(const char* name) {
  for (size_t i = 0; i < N_EXPECTED; ++i)
    if (strcmp(kExpected[i], name) == 0) return (int)i;
  return -1;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s libgradcomp.so\n", argv[0]);
    return 2;
  }
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    fprintf(stderr, "FAIL: dlopen(%s): %s\n", argv[1], dlerror());
    return 1;
  }
  for (size_t i = 0; i < N_EXPECTED; ++i)
    if (dlsym(h, kExpected[i]) == NULL) FAIL("dlsym(%s) found nothing", kExpected[i]);
  /* Internals must stay hidden. */
  const char* hidden[] = {"pncclAllReduce", "ucp_init_version", "gcAllreduce", "_ZN8gradcomp9makeStatusENS_3ErrEPKcz"};
  for (size_t i = 0; i < sizeof hidden / sizeof hidden[0]; ++i) {
    void* sym = dlsym(h, hidden[i]);
    Dl_info info;
    if (sym && dladdr(sym, &info) && info.dli_fname && strstr(info.dli_fname, "libgradcomp"))
      FAIL("%s is exported by libgradcomp.so", hidden[i]);
  }
  /* Every plugin table's name (its first member) is "gradcomp": NCCL_NET=gradcomp
   * selects the net plugin, and NCCL logs the others by it. */
  for (size_t i = 0; i < N_EXPECTED; ++i) {
    if (strncmp(kExpected[i], "nccl", 4) != 0 || strstr(kExpected[i], "Plugin_v") == NULL) continue;
    const char* const* table = (const char* const*)dlsym(h, kExpected[i]);
    if (table && (*table == NULL || strcmp(*table, "gradcomp") != 0)) FAIL("%s.name is not gradcomp", kExpected[i]);
  }

  char cmd[4096];
  snprintf(cmd, sizeof cmd, "nm -D --defined-only '%s'", argv[1]);
  FILE* nm = popen(cmd, "r");
  if (nm == NULL) FAIL("cannot run nm");
  int seen[N_EXPECTED] = {0};
  char line[1024];
  while (nm && fgets(line, sizeof line, nm)) {
    char addr[64], type[8], name[900];
    if (sscanf(line, "%63s %7s %899s", addr, type, name) != 3) continue;
    int i = expected(name);
    if (i < 0) FAIL("unexpected exported symbol %s (%s)", name, type);
    else seen[i] = 1;
  }
  if (nm && pclose(nm) != 0) FAIL("nm failed");
  for (size_t i = 0; i < N_EXPECTED; ++i)
    if (!seen[i]) FAIL("nm -D does not list %s", kExpected[i]);

  snprintf(cmd, sizeof cmd, "readelf -d '%s'", argv[1]);
  FILE* re = popen(cmd, "r");
  while (re && fgets(line, sizeof line, re))
    if (strstr(line, "NEEDED") && strstr(line, "libnccl")) FAIL("DT_NEEDED on libnccl: %s", line);
  if (re) pclose(re);

  dlclose(h);
  if (failures == 0) printf("exports: %zu symbols, as expected\n", N_EXPECTED);
  return failures == 0 ? 0 : 1;
}
