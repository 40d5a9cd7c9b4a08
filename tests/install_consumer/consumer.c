/* A program built against an installed gradcomp (tests/install_check.sh builds
 * it with find_package(gradcomp) and with pkg-config): every rank reduces
 * rank+1 with the dense algorithm and checks the exact sum. */
#include <gradcomp/gradcomp.h>
#include <stdio.h>

int main(void) {
  gcComm_t comm;
  gcAlgoConfig_t config;
  if (gcCommInitFromEnv(&comm) != gcSuccess || gcAlgoConfigCreate("dense", &config) != gcSuccess) {
    fprintf(stderr, "consumer: %s\n", gcLastError());
    return 1;
  }
  enum { N = 1 << 16 };
  static float buf[N];
  const int rank = gcCommRank(comm), size = gcCommSize(comm);
  for (int i = 0; i < N; ++i) buf[i] = (float)(rank + 1);
  if (gcAllreduce(buf, buf, N, gcFloat32, gcSum, config, 0, comm) != gcSuccess) {
    fprintf(stderr, "consumer: %s\n", gcLastError());
    return 1;
  }
  const float want = (float)(size * (size + 1) / 2);
  for (int i = 0; i < N; ++i) {
    if (buf[i] != want) {
      fprintf(stderr, "consumer: element %d is %g, want %g\n", i, buf[i], want);
      return 2;
    }
  }
  gcAlgoConfigDestroy(config);
  if (gcCommDestroy(comm) != gcSuccess) return 1;
  printf("consumer: rank %d of %d: sum %g ok (algorithms: %s)\n", rank, size, want, gcAlgorithmNames());
  return 0;
}
