// String churn (seed 003).
//
// Each thread assigns a freshly formatted integer to a std::string N times.
// The text is wider than the small-string buffer, so every assignment
// allocates the new text and frees the old one: one malloc and one free per
// iteration, as with reference-counted strings released on reassignment.
//
//   bench_strings --threads 2 --iters 10M [--width 24]
//
// Reports the time and the CPU usage, (user + sys) / (wall x cores).
#include "bench_common.h"

#include <string>

namespace {

std::string format_int(long long v, int width) {
  char buf[64];
  int n = std::snprintf(buf, sizeof buf, "%0*lld", width, v);
  if (n < 0) n = 0;
  if (n >= static_cast<int>(sizeof buf)) n = static_cast<int>(sizeof buf) - 1;
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace

int main(int argc, char **argv) {
  int threads = static_cast<int>(bench_arg_count(argc, argv, "threads", 1));
  long long iters = bench_arg_count(argc, argv, "iters", 1000000);
  int width = static_cast<int>(bench_arg_count(argc, argv, "width", 24));
  if (threads < 1 || iters < 0 || width < 16 || width > 60) bench_die("bad arguments (width must be 16..60)");

  bench_cpu_t d = bench_run_team(threads, [&](int) {
    std::string s;
    uint64_t sum = 0;
    bench_start_wait();
    for (long long i = 0; i < iters; i++) {
      s = format_int(10000000 + i, width);
      sum += static_cast<unsigned char>(s[s.size() - 1]);
    }
    return sum + s.size();
  });

  bench_json_t j;
  bench_json_begin(&j, "strings");
  bench_json_int(&j, "threads", threads);
  bench_json_int(&j, "iters", iters);
  bench_json_int(&j, "width", width);
  bench_json_cpu(&j, d);
  bench_json_end(&j);
  return 0;
}
