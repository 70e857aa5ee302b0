// The rows of aclnnMhcSinkhorn (the cache forms, numIters, x, formats, CANN's
// check order, eps unchecked) and aclnnMhcSinkhornBackward (I from the
// caches' sizes, the empty case, CANN's check order).
#include "layer_case.hpp"

#include <limits>
#include <string>
#include <vector>

namespace aclnn_layer_test {

std::vector<Row> sinkhorn_rows() {
  const Op op = Op::sinkhorn;
  const std::string o = op_name(op);
  const int64_t T = 5, N = 4, Na = 8, I = 3;
  auto one_element = [](Slot& s) { s.dims = {1}; };
  std::vector<Row> rows = {
      // The cache forms.
      computed(o + "_caches_both_null", op, [](LayerCase&) {}, Config{.optional = false}),
      computed(o + "_caches_both_one_element", op,
               [one_element](LayerCase& c) { one_element(c.slot("normOut")); one_element(c.slot("sumOut")); }),
      computed(o + "_caches_one_element_of_any_dtype_and_format", op,
               [one_element](LayerCase& c) {
                 for (const char* n : {"normOut", "sumOut"}) {
                   one_element(c.slot(n));
                   c.slot(n).dtype = ACL_INT64;
                   c.slot(n).format = ACL_FORMAT_FRACTAL_NZ;
                 }
               }),
      computed(o + "_caches_null_and_one_element", op,
               [one_element](LayerCase& c) { drop(c.slot("normOut")); one_element(c.slot("sumOut")); }),
      rejected(o + "_caches_normOut_null_sumOut_given", op, [](LayerCase& c) { drop(c.slot("normOut")); },
               ACLNN_ERR_PARAM_INVALID, "normOut NULL, sumOut given"),
      rejected(o + "_caches_sumOut_null_normOut_given", op, [](LayerCase& c) { drop(c.slot("sumOut")); },
               ACLNN_ERR_PARAM_INVALID, "normOut given, sumOut NULL"),
      rejected(o + "_caches_one_element_and_given", op,
               [one_element](LayerCase& c) { one_element(c.slot("normOut")); }, ACLNN_ERR_PARAM_INVALID,
               "normOut of one element (none), sumOut given"),
      // Any shape of the right count, contiguous.
      computed(o + "_caches_flat", op,
               [=](LayerCase& c) {
                 c.slot("normOut").dims = {2 * I * T * N * Na};
                 c.slot("sumOut").dims = {2 * I * T * Na};
               }),
      computed(o + "_caches_in_cann_documented_order", op,
               [=](LayerCase& c) {
                 c.slot("normOut").dims = {2 * I, N, Na, T};
                 c.slot("sumOut").dims = {2 * I, Na, T};
               }),
      computed(o + "_caches_offset", op, [](LayerCase& c) { c.slot("normOut").offset = 7; c.slot("sumOut").offset = 1; }),
      rejected(o + "_normOut_count", op, [=](LayerCase& c) { c.slot("normOut").dims = {2 * I * T * N * Na + 1}; },
               ACLNN_ERR_PARAM_INVALID, "normOut: expected " + std::to_string(2 * I * T * N * Na) + " elements"),
      rejected(o + "_sumOut_count_of_another_numIters", op, [=](LayerCase& c) { c.slot("sumOut").dims[0] = 2 * I + 2; },
               ACLNN_ERR_PARAM_INVALID, "sumOut: expected " + std::to_string(2 * I * T * Na) + " elements"),
      rejected(o + "_sumOut_empty", op, [](LayerCase& c) { c.slot("sumOut").dims[0] = 0; }, ACLNN_ERR_PARAM_INVALID,
               "sumOut: empty tensor [0,5,8] is not supported"),
      rejected(o + "_caches_transposed_view", op,
               [=](LayerCase& c) {
                 Slot& s = c.slot("sumOut");
                 s.dims = {2 * I * T, Na};
                 s.strides = {1, 2 * I * T};
               },
               ACLNN_ERR_PARAM_INVALID, "sumOut: expected a contiguous tensor"),
      // numIters: 1 to 100.
      computed(o + "_numIters_1", op, [](LayerCase& c) { c.num_iters = 1; }, Config{.I = 1}),
      computed(o + "_numIters_100", op, [](LayerCase& c) { c.num_iters = 100; }, Config{.lead = {2}, .I = 100}),
      rejected(o + "_numIters_0", op, [](LayerCase& c) { c.num_iters = 0; }, ACLNN_ERR_PARAM_INVALID,
               "numIters must be in [1, 100], got 0"),
      rejected(o + "_numIters_101", op, [](LayerCase& c) { c.num_iters = 101; }, ACLNN_ERR_PARAM_INVALID,
               "numIters must be in [1, 100], got 101"),
      rejected(o + "_numIters_negative", op, [](LayerCase& c) { c.num_iters = -3; }, ACLNN_ERR_PARAM_INVALID,
               "got -3"),
      // x: fp32, [..,N,N], not empty.
      rejected(o + "_x_bf16", op, [](LayerCase& c) { c.slot("x").dtype = ACL_BF16; }, ACLNN_ERR_PARAM_INVALID,
               "x: expected ACL_FLOAT, got ACL_BF16"),
      rejected(o + "_x_not_square", op,
               [](LayerCase& c) { c.slot("x").dims = {5, 4, 3}; c.slot("output").dims = {5, 4, 3}; },
               ACLNN_ERR_PARAM_INVALID, "x: expected [T,N,N]=[5,3,3], got [5,4,3]"),
      rejected(o + "_x_rank_2", op, [](LayerCase& c) { c.slot("x").dims = {5, 16}; c.slot("output").dims = {5, 16}; },
               ACLNN_ERR_PARAM_INVALID, "x: expected rank 3 or 4"),
      rejected(o + "_x_empty", op, [](LayerCase& c) { empty_tokens(c); }, ACLNN_ERR_PARAM_INVALID,
               "x: empty tensor [0,4,4] is not supported"),
      rejected(o + "_x_empty_without_caches", op, [](LayerCase& c) { empty_tokens(c); }, ACLNN_ERR_PARAM_INVALID,
               "x: empty tensor", Config{.optional = false}),
      rejected(o + "_x_N0", op, [](LayerCase& c) { c.slot("x").dims = {5, 0, 0}; c.slot("output").dims = {5, 0, 0}; },
               ACLNN_ERR_PARAM_INVALID, "x: empty tensor", Config{.optional = false}),
      rejected(o + "_output_empty", op, [](LayerCase& c) { c.slot("output").dims[0] = 0; }, ACLNN_ERR_PARAM_INVALID,
               "output: expected [5,4,4] (x's shape), got [0,4,4]"),
      // Formats: plain ones, shared with x.
      computed(o + "_all_NCHW", op,
               [](LayerCase& c) {
                 for (Slot& s : c.slots()) s.format = ACL_FORMAT_NCHW;
               }),
      rejected(o + "_output_format_not_x", op, [](LayerCase& c) { c.slot("output").format = ACL_FORMAT_NCHW; },
               ACLNN_ERR_PARAM_INVALID, "output: expected x's format ACL_FORMAT_ND, got ACL_FORMAT_NCHW"),
      rejected(o + "_sumOut_format_not_x", op, [](LayerCase& c) { c.slot("sumOut").format = ACL_FORMAT_NC; },
               ACLNN_ERR_PARAM_INVALID, "sumOut: expected x's format ACL_FORMAT_ND, got ACL_FORMAT_NC"),
      // Outputs overlapping an input: the core's check, in CANN's names.
      rejected(o + "_output_overlaps_x", op, [](LayerCase&) {}, ACLNN_ERR_PARAM_INVALID, "output"),
      // Order: the cache form before dtypes, dtypes before shapes, shapes before formats, formats before empty x.
      rejected(o + "_null_output_before_cache_form", op,
               [](LayerCase& c) { drop(c.slot("output")); drop(c.slot("sumOut")); }, ACLNN_ERR_PARAM_NULLPTR,
               "output is NULL"),
      rejected(o + "_cache_form_before_dtype", op,
               [](LayerCase& c) { drop(c.slot("sumOut")); c.slot("x").dtype = ACL_BF16; }, ACLNN_ERR_PARAM_INVALID,
               "come both or neither"),
      rejected(o + "_dtype_before_numIters", op,
               [](LayerCase& c) { c.slot("normOut").dtype = ACL_BF16; c.num_iters = 0; }, ACLNN_ERR_PARAM_INVALID,
               "normOut: expected ACL_FLOAT, got ACL_BF16"),
      rejected(o + "_output_shape_before_numIters", op,
               [](LayerCase& c) { c.slot("output").dims[1] = 3; c.num_iters = 0; }, ACLNN_ERR_PARAM_INVALID,
               "output: expected [5,4,4] (x's shape)"),
      rejected(o + "_numIters_before_rank", op,
               [](LayerCase& c) {
                 c.num_iters = 101;
                 c.slot("x").dims = {5, 16};
                 c.slot("output").dims = {5, 16};
               },
               ACLNN_ERR_PARAM_INVALID, "numIters"),
      rejected(o + "_shape_before_format", op,
               [](LayerCase& c) {
                 c.slot("x").dims = {5, 4, 3};
                 c.slot("output").dims = {5, 4, 3};
                 c.slot("output").format = ACL_FORMAT_NCHW;
               },
               ACLNN_ERR_PARAM_INVALID, "x: expected [T,N,N]"),
      rejected(o + "_format_before_empty_x", op,
               [](LayerCase& c) { empty_tokens(c); c.slot("output").format = ACL_FORMAT_NCHW; },
               ACLNN_ERR_PARAM_INVALID, "output: expected x's format"),
      rejected(o + "_empty_x_before_cache_count", op,
               [](LayerCase& c) { empty_tokens(c); c.slot("normOut").dims = {7}; }, ACLNN_ERR_PARAM_INVALID,
               "x: empty tensor"),
      rejected(o + "_cache_count_before_null_data", op,
               [](LayerCase& c) { c.slot("x").null_data = true; c.slot("normOut").dims = {7}; },
               ACLNN_ERR_PARAM_INVALID, "normOut: expected"),
      // eps is not checked (the C++ API checks it: no reference here).
      runs(o + "_eps_nan", op, [](LayerCase& c) { c.eps = std::numeric_limits<float>::quiet_NaN(); }),
      runs(o + "_eps_negative", op, [](LayerCase& c) { c.eps = -0.5f; }),
  };
  for (Row& r : rows)
    if (r.label == o + "_output_overlaps_x") r.after = [](LayerCase& c) { c.alias("output", "x"); };
  return rows;
}

std::vector<Row> sinkhorn_backward_rows() {
  const Op op = Op::sinkhorn_backward;
  const std::string o = op_name(op);
  const int64_t T = 5, N = 4, Na = 8;
  std::vector<Row> rows = {
      // I from the caches' sizes.
      computed(o + "_I_from_the_caches_2", op,
               [=](LayerCase& c) { c.slot("normOut").dims[0] = 4; c.slot("sumOut").dims[0] = 4; }),
      computed(o + "_I_from_the_caches_1_flat", op,
               [=](LayerCase& c) { c.slot("normOut").dims = {2 * T * N * Na}; c.slot("sumOut").dims = {2 * T * Na}; }),
      rejected(o + "_normOut_not_a_multiple", op, [](LayerCase& c) { c.slot("normOut").dims = {1000}; },
               ACLNN_ERR_PARAM_INVALID, "normOut: expected 2*I*T*N*Na floats (T=5, N=4, Na=8; a multiple of 320)"),
      rejected(o + "_normOut_empty", op, [](LayerCase& c) { c.slot("normOut").dims[0] = 0; }, ACLNN_ERR_PARAM_INVALID,
               "normOut: expected 2*I*T*N*Na floats"),
      rejected(o + "_sumOut_of_another_I", op, [](LayerCase& c) { c.slot("sumOut").dims[0] = 4; },
               ACLNN_ERR_PARAM_INVALID, "sumOut: expected 2*I*T*Na = 240 floats (I=3 from normOut), got 160"),
      rejected(o + "_normOut_not_contiguous", op,
               [=](LayerCase& c) {
                 Slot& s = c.slot("normOut");
                 s.dims = {6 * T * N, Na};
                 s.strides = {1, 6 * T * N};
               },
               ACLNN_ERR_PARAM_INVALID, "normOut: expected a contiguous tensor"),
      // An empty gradOutput: success, nothing run.
      nothing_run(o + "_empty_gradOutput", op, [](LayerCase& c) { c.slot("gradOutput").dims[0] = 0; c.slot("out").dims[0] = 0; }),
      nothing_run(o + "_empty_gradOutput_with_empty_caches", op,
                  [](LayerCase& c) {
                    c.slot("gradOutput").dims[0] = 0;
                    c.slot("out").dims[0] = 0;
                    c.slot("normOut").dims = {0};
                    c.slot("sumOut").dims = {0};
                  }),
      nothing_run(o + "_empty_bsnd", op,
                  [](LayerCase& c) { c.slot("gradOutput").dims = {2, 0, 4, 4}; c.slot("out").dims = {2, 0, 4, 4}; }),
      rejected(o + "_empty_out_only", op, [](LayerCase& c) { c.slot("out").dims[0] = 0; }, ACLNN_ERR_PARAM_INVALID,
               "out: expected [5,4,4] (gradOutput's shape)"),
      rejected(o + "_gradOutput_not_square", op,
               [](LayerCase& c) { c.slot("gradOutput").dims = {5, 4, 5}; c.slot("out").dims = {5, 4, 5}; },
               ACLNN_ERR_PARAM_INVALID, "gradOutput: expected [T,N,N]=[5,5,5], got [5,4,5]"),
      rejected(o + "_out_format_not_gradOutput", op, [](LayerCase& c) { c.slot("out").format = ACL_FORMAT_NHWC; },
               ACLNN_ERR_PARAM_INVALID, "out: expected gradOutput's format ACL_FORMAT_ND, got ACL_FORMAT_NHWC"),
      computed(o + "_caches_format_not_checked_by_cann", op,
               [](LayerCase& c) { c.slot("normOut").format = ACL_FORMAT_NCHW; }),
      rejected(o + "_out_overlaps_normOut", op, [](LayerCase&) {}, ACLNN_ERR_PARAM_INVALID, "out"),
      // Order: NULL before dtypes before shapes before formats before the empty case, which comes before the caches' sizes.
      rejected(o + "_null_out_before_dtype", op,
               [](LayerCase& c) { drop(c.slot("out")); c.slot("gradOutput").dtype = ACL_BF16; }, ACLNN_ERR_PARAM_NULLPTR,
               "out is NULL"),
      rejected(o + "_dtype_before_shape", op,
               [](LayerCase& c) { c.slot("sumOut").dtype = ACL_FLOAT16; c.slot("out").dims[0] = 4; },
               ACLNN_ERR_PARAM_INVALID, "sumOut: expected ACL_FLOAT, got ACL_FLOAT16"),
      rejected(o + "_shape_before_format", op,
               [](LayerCase& c) { c.slot("out").dims[0] = 4; c.slot("out").format = ACL_FORMAT_NCHW; },
               ACLNN_ERR_PARAM_INVALID, "out: expected [5,4,4]"),
      rejected(o + "_format_before_empty", op,
               [](LayerCase& c) {
                 c.slot("gradOutput").dims[0] = 0;
                 c.slot("out").dims[0] = 0;
                 c.slot("out").format = ACL_FORMAT_NCHW;
               },
               ACLNN_ERR_PARAM_INVALID, "out: expected gradOutput's format"),
      nothing_run(o + "_empty_before_caches_sizes", op,
                  [](LayerCase& c) {
                    c.slot("gradOutput").dims[0] = 0;
                    c.slot("out").dims[0] = 0;
                    c.slot("normOut").dims = {7};
                  }),
      rejected(o + "_caches_sizes_before_null_data", op,
               [](LayerCase& c) { c.slot("gradOutput").null_data = true; c.slot("sumOut").dims = {7}; },
               ACLNN_ERR_PARAM_INVALID, "sumOut: expected 2*I*T*Na"),
  };
  for (Row& r : rows)
    if (r.label == o + "_out_overlaps_normOut") r.after = [](LayerCase& c) { c.alias("out", "normOut"); };
  return rows;
}

}  // namespace aclnn_layer_test
