/* The C functions the examples trace: built with patchable entries by
 * build.rs and linked into each example. */

#define KEEP __attribute__((noinline))

KEEP long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

KEEP long square(long x) { return x * x; }

KEEP long sum_of_squares(int n) {
    long s = 0;
    for (int i = 1; i <= n; i++)
        s += square(i);
    return s;
}

KEEP long work(int n) { return fib(n) + sum_of_squares(n); }
