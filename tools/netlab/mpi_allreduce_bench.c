/* mpi_allreduce_bench: the dense baseline for the performance lab. Times
 * MPI_Allreduce (float, sum, in place) for each size given in bytes and prints
 * one JSON object per size on rank 0's stdout, the shape gradcomp-lab reads:
 *   {"impl": "mpi", "ranks": P, "size_bytes": B, "count": N, "iters": I,
 *    "time_us": mean per call, max over ranks, "wrong": W}
 * Every rank fills its buffer with rank+1, so the exact sum is P(P+1)/2 in
 * every element (small integers: exact in float for P < 4096); "wrong" counts
 * the elements of the last call that differ, summed over ranks.
 *
 *   mpirun ... mpi_allreduce_bench [-n ITERS] [-w WARMUP] [-r] SIZE...   (SIZE: 4M, 100M, 1G)
 *
 * -r times MPI_Reduce_scatter_block instead (the baseline of gradcomp-bench
 * --coll reducescatter): SIZE is the whole input, rounded down to P equal
 * blocks; "count" is the block (recvcount) and the JSON gains
 * "coll": "reducescatter"; "wrong" checks each rank's block.
 *
 * -g times MPI_Allgather instead (the baseline of gradcomp-bench --coll
 * allgather): SIZE is the whole output, rounded down to P equal blocks; rank r
 * sends a block of r+1, so output block j must hold j+1; "count" is the block
 * (sendcount) and the JSON gains "coll": "allgather".
 *
 * Which algorithm Open MPI uses comes from mpirun's MCA parameters (e.g.
 * coll_tuned_use_dynamic_rules 1 + coll_tuned_allreduce_algorithm 4 = ring);
 * the program does not choose. Build: mpicc -O2 -o mpi_allreduce_bench
 * mpi_allreduce_bench.c */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long long parse_size(const char* text) {
  char* end = NULL;
  long long v = strtoll(text, &end, 10);
  if (end == text || v <= 0) return -1;
  if (*end == 'K' || *end == 'k') v <<= 10, ++end;
  else if (*end == 'M' || *end == 'm') v <<= 20, ++end;
  else if (*end == 'G' || *end == 'g') v <<= 30, ++end;
  return *end ? -1 : v;
}

static int parse_count(const char* flag, const char* text, int lo, int hi, int* out) {
  char* end = NULL;
  long v = strtol(text, &end, 10);
  if (end == text || *end || v < lo || v > hi) {
    fprintf(stderr, "mpi_allreduce_bench: %s='%s' is invalid: expected %d..%d\n", flag, text, lo, hi);
    return 0;
  }
  *out = (int)v;
  return 1;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 1, iters = 5, warmup = 1, first = 1, scatter = 0, gather = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  for (; first + 1 < argc; first += 2) {
    if (!strcmp(argv[first], "-r")) {
      scatter = 1;
      --first;  /* no value */
    } else if (!strcmp(argv[first], "-g")) {
      gather = 1;
      --first;
    } else if (!strcmp(argv[first], "-n")) {
      if (!parse_count("-n", argv[first + 1], 1, 100000, &iters)) MPI_Abort(MPI_COMM_WORLD, 2);
    } else if (!strcmp(argv[first], "-w")) {
      if (!parse_count("-w", argv[first + 1], 0, 100000, &warmup)) MPI_Abort(MPI_COMM_WORLD, 2);
    } else {
      break;
    }
  }
  if (first >= argc) {
    if (rank == 0) fprintf(stderr, "usage: mpi_allreduce_bench [-n ITERS] [-w WARMUP] [-r|-g] SIZE...\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  for (int a = first; a < argc; ++a) {
    const long long bytes = parse_size(argv[a]);
    if (bytes < (long long)sizeof(float) || bytes / sizeof(float) > 0x7fffffffLL) {
      if (rank == 0)
        fprintf(stderr, "mpi_allreduce_bench: size '%s' is invalid: expected 4 bytes..8G, e.g. 100M\n",
                argv[a]);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const int block = (int)(bytes / sizeof(float)) / nranks;
    if (scatter && gather) {
      if (rank == 0) fprintf(stderr, "mpi_allreduce_bench: -r and -g exclude each other\n");
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const int count = scatter || gather ? block * nranks : (int)(bytes / sizeof(float));
    /* allgather: buf is the send block, out the whole output */
    float* buf = malloc((size_t)(gather ? block : count) * sizeof(float) + 1);
    float* out = scatter ? malloc((size_t)block * sizeof(float) + 1)
                 : gather ? malloc((size_t)count * sizeof(float)) : buf;
    if (!buf || !out) {
      fprintf(stderr, "mpi_allreduce_bench: rank %d cannot allocate %lld bytes\n", rank, bytes);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    double elapsed = 0;
    for (int it = 0; it < warmup + iters; ++it) {
      for (int i = 0; i < (gather ? block : count); ++i) buf[i] = (float)(rank + 1);  /* refill: in place */
      if (gather) memset(out, 0, (size_t)count * sizeof(float));
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      if (gather)
        MPI_Allgather(buf, block, MPI_FLOAT, out, block, MPI_FLOAT, MPI_COMM_WORLD);
      else if (scatter)
        MPI_Reduce_scatter_block(buf, out, block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else
        MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      if (it >= warmup) elapsed += MPI_Wtime() - t0;
    }
    const float expect = (float)nranks * (float)(nranks + 1) / 2.0f;
    long long wrong = 0, wrongAll = 0;
    if (gather)
      for (int i = 0; i < count; ++i) wrong += out[i] != (float)(i / block + 1);
    else
      for (int i = 0; i < (scatter ? block : count); ++i) wrong += out[i] != expect;
    double meanUs = elapsed / iters * 1e6, maxUs = 0;
    MPI_Reduce(&meanUs, &maxUs, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&wrong, &wrongAll, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      printf("{\"impl\": \"mpi\", %s\"ranks\": %d, \"size_bytes\": %lld, \"count\": %d, "
             "\"iters\": %d, \"time_us\": %.3f, \"wrong\": %lld}\n",
             scatter ? "\"coll\": \"reducescatter\", " : gather ? "\"coll\": \"allgather\", " : "",
             nranks, (long long)count * 4, scatter || gather ? block : count, iters, maxUs, wrongAll);
      fflush(stdout);
    }
    if (out != buf) free(out);
    free(buf);
  }
  MPI_Finalize();
  return 0;
}
