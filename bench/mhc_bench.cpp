// mhc-bench: one run measures this machine's roofline (fp32 FMA peak, triad
// bandwidth), then times MhcPre and MhcPreBackward at the canonical shapes on
// pre-allocated, pre-touched buffers, and prints and writes (JSON) per shape and
// operator: time, GB/s, GFLOP/s, the roofline bound and the fraction of it
// reached, the 1-thread vs n-thread speed-up, and the extra memory of a call.
//
// Then the layer operators (layer_cases.hpp) in a second table.
//
//   mhc-bench [--json PATH] [--shapes a,b,c,d,e,decode,post,sinkhorn,boundary] [--runs N] [--threads N]
//             [--min-seconds S] [--stream-mib M]
//   mhc-bench --check [--shapes ...] [--check-tokens N]: the same problems through the
//             operators' test drivers against float64 (check_mode.hpp), no timing.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "check_mode.hpp"
#include "decode_cases.hpp"
#include "floor_pass.hpp"
#include "json_writer.hpp"
#include "layer_cases.hpp"
#include "machine_probes.hpp"
#include "memory_meter.hpp"
#include "mhc/mhc.hpp"
#include "operator_cases.hpp"
#include "system_load.hpp"

namespace mhc_bench {
namespace {

struct CommandLine {
  std::string json_path = "bench-results.json";
  std::string commit = MHC_BENCH_COMMIT;  // the checkout configured, unless --commit names another
  std::vector<std::string> shapes{"a", "b", "c", "d", "e", "decode", "post", "sinkhorn", "boundary"};
  int runs = 5;
  int threads = 0;           // 0: hardware threads
  double min_seconds = 0.5;  // keep timing small cases until this much time is spent
  int64_t stream_mib = 0;    // 0: max(256, LLC)
  bool check = false;        // --check: correctness instead of timing
  int64_t check_tokens = 0;  // --check-tokens: at most this many tokens a problem (0: the shape's T)
};

[[noreturn]] void usage(const char* error) {
  if (error) std::fprintf(stderr, "mhc-bench: %s\n", error);
  std::fprintf(stderr,
               "usage: mhc-bench [--json PATH] [--shapes a,b,c,d,e,decode,post,sinkhorn,boundary] [--runs N] [--threads N]\n"
               "                 [--min-seconds S] [--stream-mib M] [--commit REV]\n"
               "       mhc-bench --check [--shapes ...] [--check-tokens N]   (no timing: every face and\n"
               "                 family against the float64 references, at most N tokens a problem)\n"
               "  shapes: a T=4096 N=4 D=4096 bf16 | b T=16384 N=4 D=7168 bf16 |\n"
               "          c T=2048 N=8 D=2048 fp16 (no gamma) | d T=1024 N=4 D=512 bf16 |\n"
               "          e T=1 N=4 D=7168 bf16 (forward only) |\n"
               "          decode T=1,4,16,32,64 N=4 D=4096,7168 bf16 forward, C++ and aclnn, with the floor probe |\n"
               "          post MhcPost T=4096 N=4 D=4096 bf16 | sinkhorn MhcSinkhorn T=65536 N=4 20 iterations |\n"
               "          boundary MhcPostPre (V4, V4.1), the single-pass and the site backward T=4096 N=4 D=4096 bf16\n");
  std::exit(error ? 2 : 0);
}

CommandLine parse(int argc, char** argv) {
  CommandLine c;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + arg).c_str());
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") usage(nullptr);
    else if (arg == "--json") c.json_path = next();
    else if (arg == "--commit") c.commit = next();
    else if (arg == "--runs") c.runs = std::max(1, std::atoi(next().c_str()));
    else if (arg == "--threads") c.threads = std::max(1, std::atoi(next().c_str()));
    else if (arg == "--min-seconds") c.min_seconds = std::atof(next().c_str());
    else if (arg == "--stream-mib") c.stream_mib = std::atoll(next().c_str());
    else if (arg == "--check") c.check = true;
    else if (arg == "--check-tokens") c.check_tokens = std::max<int64_t>(0, std::atoll(next().c_str()));
    else if (arg == "--shapes") {
      c.shapes.clear();
      std::stringstream list(next());
      for (std::string s; std::getline(list, s, ',');)
        if (!s.empty()) c.shapes.push_back(s);
    } else usage(("unknown option " + arg).c_str());
  }
  if (c.threads == 0) c.threads = std::max(1, int(std::thread::hardware_concurrency()));
  return c;
}

// What one operator at one shape measured, and what the roofline makes of it.
struct OperatorResult {
  std::string op;  // "forward" / "backward"
  OperatorCost cost;
  Timing main_timing, one_thread_timing;  // at the main thread count, at 1 thread
  bool has_one_thread = false;
  int64_t rss_extra = -1, counted_extra = -1, retained = -1, expected_workspace = -1;
  double foreign_cpus = -1;  // CPUs other processes used meanwhile (system_load.hpp)
};

// Working sets below this stay in this machine's caches between calls (the triad
// bandwidth falls off between 3 x 8 MiB and 3 x 32 MiB here; the VM's reported LLC
// size is not to be trusted), so the DRAM roofline does not bind them.
constexpr double kCacheResidentBytes = 32.0 * (1 << 20);

struct Roofline {
  double bound_ms = 0;
  bool memory_bound = true;
  double fraction = 0;  // bound / measured
};

Roofline roofline(const OperatorCost& c, double ms, double bandwidth_gbs, double peak_gflops) {
  const double memory_ms = bandwidth_gbs > 0 ? c.bytes / (bandwidth_gbs * 1e9) * 1e3 : 0;
  const double compute_ms = peak_gflops > 0 ? c.flops / (peak_gflops * 1e9) * 1e3 : 0;
  Roofline r;
  r.bound_ms = std::max(memory_ms, compute_ms);
  r.memory_bound = memory_ms >= compute_ms;
  r.fraction = ms > 0 ? r.bound_ms / ms : 0;
  return r;
}

template <class TimeFn, class WorkspaceFn>
OperatorResult measure(const char* op, const ShapeBuffers& buffers, OperatorCost cost,
                       const CommandLine& cl, TimeFn time_fn, WorkspaceFn workspace_fn) {
  OperatorResult r;
  r.op = op;
  r.cost = cost;
  r.expected_workspace = workspace_fn(buffers, cl.threads);
  PeakRssMeter rss;
  CountedMemoryMeter counted;
  ForeignCpuMeter foreign;
  foreign.start();
  release_library_workspace();  // measure from zero, whatever earlier shapes left
  rss.start();
  counted.start();
  r.main_timing = time_fn(buffers, cl.threads, cl.runs, cl.min_seconds, 1000);
  r.rss_extra = rss.extra_bytes();
  r.counted_extra = counted.peak_extra_bytes();
  r.retained = counted.retained_bytes();
  if (cl.threads > 1) {
    r.one_thread_timing = time_fn(buffers, 1, cl.runs, cl.min_seconds, 1000);
    r.has_one_thread = true;
  }
  r.foreign_cpus = foreign.foreign_cpus();
  return r;
}

std::string now_utc() {
  char buf[64];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

double mib(int64_t bytes) { return double(bytes) / double(1 << 20); }

void write_timing(JsonWriter& j, const Timing& t, int threads) {
  j.begin_object();
  j.field("threads", threads).field("median_ms", t.median()).field("min_ms", t.min());
  j.field("max_ms", t.max()).field("runs", int(t.ms.size()));
  j.key("all_ms").numbers(t.ms);
  j.end_object();
}

void write_operator(JsonWriter& j, const OperatorResult& r, const MachineLimits& m,
                    const RooflinePeak& peak_n, const RooflinePeak& peak_1, int threads) {
  const double ms = r.main_timing.median();
  const Roofline roof = roofline(r.cost, ms, m.bandwidth_gbs(threads).value_or(0), peak_n.gflops);
  j.key(r.op).begin_object();
  j.field("flops", r.cost.flops).field("bytes", r.cost.bytes);
  j.field("time_ms", ms).field("gbytes_per_s", r.cost.bytes / (ms * 1e-3) * 1e-9);
  j.field("gflops_per_s", r.cost.flops / (ms * 1e-3) * 1e-9);
  j.field("roofline_bound_ms", roof.bound_ms).field("bound_by", roof.memory_bound ? "memory" : "compute");
  j.field("roofline_fraction", roof.fraction);
  j.field("cache_resident", r.cost.bytes < kCacheResidentBytes);
  j.field("other_processes_cpus", r.foreign_cpus);
  j.key("timing").begin_array();
  write_timing(j, r.main_timing, threads);
  if (r.has_one_thread) write_timing(j, r.one_thread_timing, 1);
  j.end_array();
  if (r.has_one_thread) {
    const double ms1 = r.one_thread_timing.median();
    const Roofline roof1 = roofline(r.cost, ms1, m.bandwidth_gbs(1).value_or(0), peak_1.gflops);
    j.field("time_1_thread_ms", ms1).field("speedup_vs_1_thread", ms1 / ms);
    j.field("roofline_fraction_1_thread", roof1.fraction);
  } else {
    j.key("time_1_thread_ms").null().key("speedup_vs_1_thread").null();
  }
  j.key("extra_memory").begin_object();
  if (r.rss_extra >= 0) j.field("peak_rss_bytes", r.rss_extra); else j.key("peak_rss_bytes").null();
  j.field("counted_peak_bytes", r.counted_extra).field("retained_between_calls_bytes", r.retained);
  if (r.expected_workspace >= 0) j.field("expected_workspace_bytes", r.expected_workspace);
  else j.key("expected_workspace_bytes").null();
  j.end_object();
  j.end_object();
}

void print_row(const ShapeSpec& s, const OperatorResult& r, const MachineLimits& m,
               const RooflinePeak& peak, int threads) {
  const double ms = r.main_timing.median();
  const Roofline roof = roofline(r.cost, ms, m.bandwidth_gbs(threads).value_or(0), peak.gflops);
  char speedup[16] = "    -";
  if (r.has_one_thread) std::snprintf(speedup, sizeof speedup, "%5.2fx", r.one_thread_timing.median() / ms);
  char rss[16] = "  n/a";
  if (r.rss_extra >= 0) std::snprintf(rss, sizeof rss, "%7.2f", mib(r.rss_extra));
  std::printf("%-5s %-8s %10.3f %6s %8.2f %9.1f %10.3f %-4s %6.1f%%%s %s %8.2f %8.2f %5.2f\n",
              s.name.c_str(), r.op.c_str(), ms, speedup, r.cost.bytes / (ms * 1e6),
              r.cost.flops / (ms * 1e6), roof.bound_ms, roof.memory_bound ? "mem" : "cmp",
              100.0 * roof.fraction, r.cost.bytes < kCacheResidentBytes ? "c" : " ", rss,
              mib(r.counted_extra), mib(r.expected_workspace), r.foreign_cpus);
  std::fflush(stdout);
}

int run(int argc, char** argv) {
  const CommandLine cl = parse(argc, argv);
  std::vector<ShapeSpec> shapes;
  std::vector<std::string> layer_names;
  bool decode = false;
  for (const auto& name : cl.shapes) {
    if (name == "decode") {
      decode = true;
      continue;
    }
    if (is_layer_case(name)) {
      layer_names.push_back(name);
      continue;
    }
    bool found = false;
    for (const auto& s : canonical_shapes())
      if (s.name == name) { shapes.push_back(s); found = true; }
    if (!found) usage(("unknown shape " + name).c_str());
  }
  if (cl.check) return run_checks(shapes, layer_names, cl.check_tokens);
  const std::string isa = mhc::isa();
  std::printf("mhc-bench: mhc %s, kernels %s, %d thread(s) (speed-up against 1)\n", mhc_version(),
              isa.c_str(), cl.threads);
  std::printf("probing the machine (FMA peak, triad bandwidth)...\n");
  std::fflush(stdout);
  ForeignCpuMeter probe_foreign;
  probe_foreign.start();
  const MachineLimits m = probe_machine(cl.threads, cl.stream_mib);
  double max_foreign = probe_foreign.foreign_cpus();
  std::printf("cpu: %s, %d hardware threads, LLC %.0f MiB\n", m.cpu_model.c_str(), m.hardware_threads,
              mib(m.llc_bytes));
  for (const auto& p : m.fma_peaks)
    std::printf("%-9s peak %-8s %d thread(s): %8.1f GFLOP/s\n", p.isa == "amx-bf16" ? "bf16 tile" : "fp32 FMA",
                p.isa.c_str(), p.threads, p.gflops);
  for (const auto& b : m.bandwidths)
    std::printf("triad bandwidth   %d thread(s): %8.1f GB/s  (3 x %.0f MiB, read+write bytes)\n",
                b.threads, b.gbytes_per_s, mib(m.triad_array_bytes));
  std::printf("first touch of fresh memory: %.2f us per 4 KiB page\n", m.first_touch_us_per_page);
  const RooflinePeak peak_n = roofline_peak_for(m, isa, cl.threads);
  const RooflinePeak peak_1 = roofline_peak_for(m, isa, 1);
  std::printf("roofline (%d thread(s)): %.1f GFLOP/s (%s peak, for kernels %s), %.1f GB/s\n\n",
              cl.threads, peak_n.gflops, peak_n.isa.c_str(), isa.c_str(),
              m.bandwidth_gbs(cl.threads).value_or(0));

  JsonWriter j;
  j.begin_object();
  j.field("tool", "mhc-bench").field("mhc_version", mhc_version()).field("commit", cl.commit);
  j.field("date_utc", now_utc());
  j.field("isa", isa).field("threads", cl.threads).field("runs_min", cl.runs);
  j.field("min_seconds", cl.min_seconds);
  j.key("machine").begin_object();
  j.field("cpu", m.cpu_model).field("hardware_threads", m.hardware_threads).field("llc_bytes", m.llc_bytes);
  j.key("fma_peak_gflops").begin_object();
  for (const char* name : {"avx512", "avx2", "amx-bf16"}) {
    j.key(name).begin_object();
    for (const auto& p : m.fma_peaks)
      if (p.isa == name) j.field(std::to_string(p.threads), p.gflops);
    j.end_object();
  }
  j.end_object();
  j.key("triad_bandwidth_gbs").begin_object();
  for (const auto& b : m.bandwidths) j.field(std::to_string(b.threads), b.gbytes_per_s);
  j.end_object();
  j.field("triad_array_bytes", m.triad_array_bytes);
  j.field("first_touch_us_per_page", m.first_touch_us_per_page);
  j.field("other_processes_cpus_during_probes", max_foreign);
  j.key("roofline").begin_object();
  j.field("peak_isa", peak_n.isa).field("peak_gflops", peak_n.gflops);
  j.field("peak_gflops_1_thread", peak_1.gflops);
  j.field("bandwidth_gbs", m.bandwidth_gbs(cl.threads).value_or(0));
  j.field("bandwidth_gbs_1_thread", m.bandwidth_gbs(1).value_or(0));
  j.end_object();
  j.end_object();

  std::printf("%-5s %-8s %10s %6s %8s %9s %15s %8s %8s %8s %8s %5s\n", "shape", "operator", "ms",
              "1->n", "GB/s", "GFLOP/s", "bound ms", "roof", "rss MiB", "cnt MiB", "ws MiB", "busy");
  j.key("cases").begin_array();
  for (const ShapeSpec& s : shapes) {
    const ShapeBuffers buffers(s);
    std::vector<OperatorResult> results;
    results.push_back(measure("forward", buffers, forward_cost(s), cl, time_forward,
                              expected_forward_workspace));
    print_row(s, results.back(), m, peak_n, cl.threads);
    if (s.backward) {
      results.push_back(measure("backward", buffers, backward_cost(s), cl, time_backward,
                                expected_backward_workspace));
      print_row(s, results.back(), m, peak_n, cl.threads);
    }
    j.begin_object();
    j.field("shape", s.name).field("T", s.T).field("N", s.N).field("D", s.D).field("K", s.K());
    j.field("F", s.F()).field("dtype", s.dtype_name()).field("gamma", s.gamma);
    j.field("grad_x_post", s.grad_x_post).field("note", s.note);
    j.field("buffer_bytes", buffers.total_bytes());
    for (const auto& r : results) {
      write_operator(j, r, m, peak_n, peak_1, cl.threads);
      max_foreign = std::max(max_foreign, r.foreign_cpus);
    }
    j.end_object();
  }
  j.end_array();
  if (decode) {
    ForeignCpuMeter foreign;
    foreign.start();
    const DecodeResults d = run_decode_cases(cl.threads, cl.runs, cl.min_seconds, peak_n.gflops);
    const double busy = foreign.foreign_cpus();
    max_foreign = std::max(max_foreign, busy);
    std::printf("\ndecode: MhcPre forward, N=4 bf16 with gamma; floor: each row's phi streamed once through FMAs on %d "
                "persistent threads, timed in turn with the row's calls (the floor D= lines: T=1's)\n", cl.threads);
    for (const DecodeFloor& f : d.floors)
      std::printf("floor D=%-5lld %10.4f ms  (%s)\n", (long long)f.D, f.timing.median(),
                  floor_blocking_name(f.blocking));
    std::printf("%-5s %-5s %10s %10s %10s %8s %11s %8s %12s %8s %12s %8s %5s\n", "D", "T", "ms", "aclnn ms",
                "floor ms", "/floor", "FMA bnd ms", "of FMA", "hc_pre ms", "/floor", "prepared ms", "/floor", "busy");
    j.key("decode_floors").begin_array();
    for (const DecodeFloor& f : d.floors) {
      j.begin_object();
      j.field("D", f.D).field("floor_ms", f.timing.median()).field("runs", int(f.timing.ms.size()));
      j.field("floor_blocking", floor_blocking_name(f.blocking));
      j.end_object();
    }
    j.end_array();
    j.key("decode_cases").begin_array();
    for (const DecodeRow& r : d.rows) {
      const double ms = r.cpp.median(), acl = r.aclnn.median(), engine = r.engine_pre.median(),
                   prepared = r.engine_pre_prepared.median();
      std::printf("%-5lld %-5lld %10.4f %10.4f %10.4f %7.2fx %11.4f %7.1f%% %12.4f %7.2fx %12.4f %7.2fx %5.2f\n",
                  (long long)r.shape.D, (long long)r.shape.T, ms, acl, r.floor_ms, acl / r.floor_ms, r.fma_bound_ms,
                  100.0 * r.fma_bound_ms / acl, engine, engine / r.floor_ms, prepared, prepared / r.floor_ms, busy);
      j.begin_object();
      j.field("T", r.shape.T).field("N", r.shape.N).field("D", r.shape.D).field("dtype", r.shape.dtype_name());
      j.field("time_ms", ms).field("aclnn_time_ms", acl).field("floor_ms", r.floor_ms);
      j.field("aclnn_over_floor", acl / r.floor_ms).field("fma_bound_ms", r.fma_bound_ms);
      j.field("aclnn_fraction_of_fma_bound", r.fma_bound_ms / acl).field("other_processes_cpus", busy);
      j.field("engine_pre_ms", engine).field("engine_pre_over_floor", engine / r.floor_ms);
      j.field("engine_pre_prepared_ms", prepared).field("engine_pre_prepared_over_floor", prepared / r.floor_ms);
      j.key("timing").begin_array();
      write_timing(j, r.cpp, cl.threads);
      j.end_array();
      j.end_object();
    }
    j.end_array();
    std::printf("ms: the C++ API; aclnn ms: GetWorkspaceSize and the call, as an inference step makes them; "
                "/floor and of FMA (2 T F K at the FMA peak) from the aclnn time; hc_pre ms: the engines' pre "
                "(MhcPreSinkhorn, no gamma, 20 iterations; SGLang's hc_pre_fused_cpu) through the C++ API; prepared ms: "
                "the same with its weights prepared once (options.prepared).\n");
  }
  if (!layer_names.empty()) {
    std::printf("\n%-9s %-9s %-28s %10s %6s %8s %10s %7s %5s\n", "operator", "pass", "shape", "ms", "1->n", "GB/s",
                "triad ms", "triad", "busy");
    j.key("layer_cases").begin_array();
    const double bandwidth = m.bandwidth_gbs(cl.threads).value_or(0);
    for (const std::string& name : layer_names) {
      ForeignCpuMeter foreign;
      foreign.start();
      const std::vector<LayerCase> cases = run_layer_cases(name, cl.threads, cl.runs, cl.min_seconds);
      const double busy = foreign.foreign_cpus();
      max_foreign = std::max(max_foreign, busy);
      for (const LayerCase& c : cases) {
        const double ms = c.main_timing.median();
        const double bound_ms = bandwidth > 0 ? c.cost.bytes / (bandwidth * 1e9) * 1e3 : 0;
        const bool one = !c.one_thread_timing.ms.empty();
        char speedup[16] = "    -";
        if (one) std::snprintf(speedup, sizeof speedup, "%5.2fx", c.one_thread_timing.median() / ms);
        std::printf("%-9s %-9s %-28s %10.3f %6s %8.2f %10.3f %6.1f%% %5.2f\n", c.name.c_str(), c.op.c_str(),
                    c.shape.c_str(), ms, speedup, c.cost.bytes / (ms * 1e6), bound_ms, 100.0 * bound_ms / ms, busy);
        j.begin_object();
        j.field("operator", c.name).field("pass", c.op).field("shape", c.shape);
        j.field("flops", c.cost.flops).field("bytes", c.cost.bytes).field("time_ms", ms);
        j.field("gbytes_per_s", c.cost.bytes / (ms * 1e-3) * 1e-9);
        j.field("triad_bound_ms", bound_ms).field("triad_fraction", bound_ms / ms);
        j.field("other_processes_cpus", busy);
        j.key("timing").begin_array();
        write_timing(j, c.main_timing, cl.threads);
        if (one) write_timing(j, c.one_thread_timing, 1);
        j.end_array();
        j.end_object();
      }
    }
    j.end_array();
    std::printf("triad: bytes moved (every input read once, every output written once) at the triad\n"
                "bandwidth measured above, and its fraction of the time.\n");
  }
  j.end_object();
  if (!j.write_file(cl.json_path)) {
    std::fprintf(stderr, "mhc-bench: cannot write %s\n", cl.json_path.c_str());
    return 1;
  }
  std::printf("\nms: median of >= %d runs after one warm-up, %d thread(s); 1->n: speed-up over 1 thread;\n"
              "roof: roofline bound / time (c: working set < 32 MiB, cache-resident, the DRAM bound\n"
              "does not bind); rss: peak RSS over the inputs+outputs baseline; cnt: peak of counted\n"
              "allocations (heap + anonymous mmap); ws: workspace the library plans; busy: CPUs\n"
              "other processes used meanwhile.\n",
              cl.runs, cl.threads);
  if (max_foreign > 0.2)
    std::printf("WARNING: other processes used up to %.2f CPUs during the run: figures are skewed, "
                "rerun on a quiet machine.\n", max_foreign);
  std::printf("results: %s\n", cl.json_path.c_str());
  return 0;
}

}  // namespace
}  // namespace mhc_bench

int main(int argc, char** argv) { return mhc_bench::run(argc, argv); }
