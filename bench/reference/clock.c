/* The core clock under load, for bench/train_vs_eager.sh: a chain of dependent integer adds
 * retires one add per cycle on x86-64, so adds per second is the clock. Prints GHz, the median
 * of 5 timings. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int Compare(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(void) {
  const long n = 1000000000L;
  double ghz[5];
  for (int rep = 0; rep < 5; ++rep) {
    struct timespec a, b;
    long x = 0;
    clock_gettime(CLOCK_MONOTONIC, &a);
    __asm__ volatile(
        "mov %1, %%rcx\n"
        "1:\n"
        "add $1, %0\n add $1, %0\n add $1, %0\n add $1, %0\n"
        "add $1, %0\n add $1, %0\n add $1, %0\n add $1, %0\n"
        "sub $8, %%rcx\n"
        "jnz 1b\n"
        : "+r"(x)
        : "r"(n)
        : "rcx");
    clock_gettime(CLOCK_MONOTONIC, &b);
    ghz[rep] = (double)x / ((double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9) / 1e9;
  }
  qsort(ghz, 5, sizeof ghz[0], Compare);
  printf("%.2f\n", ghz[2]);
  return 0;
}
