/* The bundled demo program: nested calls, recursion and two threads.
 * `shadowgraph demo` builds it with -fpatchable-function-entry=5 and traces it. */
#include <pthread.h>
#include <stdio.h>

#define KEEP __attribute__((noinline, noipa))

volatile long sink;

/* Both calls stay real calls (no accumulator loop): fib(n) makes
 * 2*fib(n+1)-1 calls in all. */
KEEP long fib(int n) {
    if (n < 2) return n;
    long a = fib(n - 1);
    long b = fib(n - 2);
    sink = b;
    return a + b;
}
KEEP int square(int x) { return x * x; }
KEEP int sum_squares(int n) {
    int s = 0;
    for (int i = 1; i <= n; i++) s += square(i);
    return s;
}
KEEP void parse_line(int i) { sink += sum_squares(i % 10); }
KEEP void parse_file(int lines) {
    for (int i = 0; i < lines; i++) parse_line(i);
}
KEEP void *worker(void *arg) {
    long n = (long)arg;
    sink += fib((int)n);
    parse_file(100);
    return NULL;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, worker, (void *)15L);
    long f = fib(20);
    parse_file(50);
    pthread_join(t, NULL);
    printf("fib(20) = %ld, sum_squares(10) = %d\n", f, sum_squares(10));
    return 0;
}
