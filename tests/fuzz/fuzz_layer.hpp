// The fuzz targets of the rest of the layer (docs/reliability.md, "Fuzzing"):
// MhcSinkhorn, MhcPost and the fused MhcPreSinkhorn, forward or backward (the
// input's first byte), through the C++ and the C face.
//
// One input, one call, generated as for the MhcPre targets (fuzz_common.hpp:
// shapes, dtypes, scalars among the edge values, then per tensor a layout and
// mutations, placement in one exactly-sized arena). The checks:
//   - rejected: the C++ face, the C face and ops::*::validate agree on code, kind
//     and message; not one arena byte changed (a NULL required C argument: 161001);
//   - accepted: only bytes of output elements changed; then, on a copy of the
//     arena as it was, the oracle: MhcSinkhorn and MhcPost run by the reference
//     family give the same bits (SPEC §10/§11: every family does), NaN where NaN;
//     MhcPreSinkhorn on a family other than the reference gives the bits of the
//     unfused chain (SPEC §12); and a rerun with another thread count at another
//     address gives the same bits.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mhc_fuzz {

enum class LayerOp { sinkhorn, post, pre_sinkhorn };
void run_layer_target(const uint8_t* data, size_t size, LayerOp op);

}  // namespace mhc_fuzz
