// Other processes' CPU use, from /proc/stat (all CPUs) and /proc/self/stat (us).
#include "system_load.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>

namespace mhc_bench {
namespace {

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// user + nice + system + irq + softirq + steal of all CPUs, in clock ticks.
int64_t machine_busy_ticks() {
  FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return -1;
  long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  const int n = std::fscanf(f, "cpu %lld %lld %lld %lld %lld %lld %lld %lld", &user, &nice, &system,
                            &idle, &iowait, &irq, &softirq, &steal);
  std::fclose(f);
  return n >= 4 ? user + nice + system + irq + softirq + steal : -1;
}

// utime + stime of this process (all threads), in clock ticks.
int64_t own_ticks() {
  FILE* f = std::fopen("/proc/self/stat", "r");
  if (!f) return -1;
  char buf[1024];
  const size_t len = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[len] = '\0';
  const char* p = std::strrchr(buf, ')');  // the command name may hold spaces
  if (!p) return -1;
  unsigned long long utime = 0, stime = 0;
  // after ")": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
  if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
    return -1;
  return int64_t(utime + stime);
}

}  // namespace

void ForeignCpuMeter::start() {
  machine_busy_ticks_ = machine_busy_ticks();
  own_ticks_ = own_ticks();
  wall_start_ = wall_seconds();
}

double ForeignCpuMeter::foreign_cpus() const {
  const int64_t busy = machine_busy_ticks(), own = own_ticks();
  const double wall = wall_seconds() - wall_start_;
  if (busy < 0 || own < 0 || machine_busy_ticks_ < 0 || own_ticks_ < 0 || wall <= 0) return -1;
  const double foreign_ticks = double((busy - machine_busy_ticks_) - (own - own_ticks_));
  const double v = foreign_ticks / double(sysconf(_SC_CLK_TCK)) / wall;
  return v < 0 ? 0 : v;
}

}  // namespace mhc_bench
