/*
 * clock — the one monotonic clock of the program.
 *
 * clock_mono_s() returns CLOCK_MONOTONIC as seconds in a double (about 0.1 µs resolution over
 * years of uptime); it has no state and is safe from any thread. Every deadline, duration and
 * timestamp that gemmad compares (request deadlines, queue time, KV session ages, benchmark
 * timings) comes from it, so values taken on different threads compare directly.
 */
#ifndef GEMMAD_BASE_CLOCK_H
#define GEMMAD_BASE_CLOCK_H

double clock_mono_s(void);

#endif
