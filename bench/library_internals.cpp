// The one file of mhc-bench that uses the library's internal headers (src/):
//   - whether the library's AMX family runs here, and the tile peak probe written
//     with its tile operations;
//   - the workspace a call will use, asked of the operator layer (validate ->
//     size), the same two calls the C++ face makes before it gets the workspace;
//   - dropping the calling thread's reused workspace buffer, so each shape's
//     extra memory is measured from zero instead of from what an earlier, larger
//     shape left behind.
#include "kernels/registry.hpp"
#include "ops/pre/backward.hpp"
#include "ops/pre/forward.hpp"
#if defined(MHC_WITH_AMX)
#include "kernels/amx/tiles.hpp"
#endif
#include "operator_cases.hpp"
#include "runtime/workspace.hpp"

namespace mhc_bench {

int64_t expected_forward_workspace(const ShapeBuffers& b, int threads) {
  mhc::Options options;
  options.num_threads = threads;
  mhc::core::ForwardProblem problem;
  if (!mhc::ops::pre::forward::validate(b.forward_inputs(), b.forward_outputs(), options, &problem).ok())
    return -1;
  return int64_t(mhc::ops::pre::forward::workspace_bytes(problem, threads));
}

int64_t expected_backward_workspace(const ShapeBuffers& b, int threads) {
  mhc::Options options;
  options.num_threads = threads;
  mhc::core::BackwardProblem problem;
  if (!mhc::ops::pre::backward::validate(b.backward_inputs(), b.backward_outputs(), options, &problem).ok())
    return -1;
  return int64_t(mhc::ops::pre::backward::workspace_bytes(problem, threads));
}

bool release_library_workspace() {
  mhc::runtime::release_thread_workspace();
  return true;
}

bool amx_tiles_usable() {
#if defined(MHC_WITH_AMX)
  return mhc::kernels::amx::tiles_usable();
#else
  return false;
#endif
}

float amx_tile_chains(int64_t iterations) {
#if defined(MHC_WITH_AMX)
  namespace amx = mhc::kernels::amx;
  amx::TileConfig config;
  for (int i = 0; i < 6; ++i) config.rows[i] = 16, config.bytes_per_row[i] = 64;
  alignas(64) static const uint16_t zeros[16 * 32] = {};  // the timing does not depend on values
  alignas(64) float out[16 * 16];
  amx::load_config(config);
  amx::tile_zero<0>(), amx::tile_zero<1>(), amx::tile_zero<2>(), amx::tile_zero<3>();
  amx::tile_load<4>(zeros, 64);
  amx::tile_load<5>(zeros, 64);
  for (int64_t i = 0; i < iterations; ++i) {
    amx::tile_dpbf16ps<0, 4, 5>();
    amx::tile_dpbf16ps<1, 4, 5>();
    amx::tile_dpbf16ps<2, 4, 5>();
    amx::tile_dpbf16ps<3, 4, 5>();
  }
  amx::tile_store<0>(out, 64);
  amx::release_tiles();
  return out[0];
#else
  (void)iterations;
  return 0.0f;  // not called: amx_tiles_usable() is false without the AMX kernels
#endif
}

}  // namespace mhc_bench
