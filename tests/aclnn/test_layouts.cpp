// aclTensors with a non-zero offset and non-contiguous strides give the same
// numbers as contiguous ones, bit for bit (every kernel path reads strided rows
// into the same vectors), and outputs are written only through their views
// (the gaps of their storage stay untouched).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "op_case.hpp"

namespace aclnn_test {
namespace {

enum class Layout { padded_row_major, padded_column_major, bsnd_tokens };

struct LayoutRow {
  Op op;
  Layout layout;
};

// Every dim padded by one element; row-major or reversed (first dim fastest).
std::vector<int64_t> padded_strides(const std::vector<int64_t>& dims, bool column_major) {
  std::vector<int64_t> s(dims.size(), 1);
  if (column_major) {
    for (size_t i = 1; i < dims.size(); ++i) s[i] = s[i - 1] * (dims[i - 1] + 1);
  } else {
    for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * (dims[i] + 1);
  }
  return s;
}

void apply(Layout layout, OpCase& c) {
  int64_t offset = 3;
  for (Slot& s : c.slots()) {
    if (layout == Layout::bsnd_tokens) continue;
    s.strides = padded_strides(s.dims, layout == Layout::padded_column_major);
    s.offset = offset++;
  }
}

void PrintTo(const LayoutRow& row, std::ostream* os) { *os << op_name(row.op) << " layout " << int(row.layout); }

class Layouts : public ::testing::TestWithParam<LayoutRow> {};

TEST_P(Layouts, GiveTheNumbersOfContiguousTensors) {
  const LayoutRow row = GetParam();
  OpCase contiguous(row.op);
  contiguous.materialize();
  ASSERT_EQ(contiguous.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  ASSERT_EQ(contiguous.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();

  OpCase strided(row.op);
  apply(row.layout, strided);
  if (row.layout == Layout::bsnd_tokens) {
    // [T,...] as [B,S,...] with T = 5 = 1 x 5 on every per-token tensor; memory unchanged.
    for (Slot& s : strided.slots()) {
      const bool per_token = s.name != "phi" && s.name != "alpha" && s.name != "bias" && s.name != "gamma" &&
                             s.name != "gradPhi" && s.name != "gradAlpha" && s.name != "gradBias" &&
                             s.name != "gradGamma";
      if (per_token) s.dims.insert(s.dims.begin(), 1);
    }
  }
  strided.materialize();
  ASSERT_EQ(strided.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  ASSERT_EQ(strided.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();

  for (const Slot& s : contiguous.slots()) {
    if (!s.output || !s.present) continue;
    EXPECT_EQ(strided.logical_bytes(s.name), contiguous.logical_bytes(s.name)) << s.name;
    EXPECT_TRUE(strided.gaps_untouched(s.name)) << s.name;
  }
}

std::vector<LayoutRow> layout_rows() {
  std::vector<LayoutRow> rows;
  for (Op op : {Op::pre, Op::pre_v2, Op::backward, Op::backward_v2})
    for (Layout l : {Layout::padded_row_major, Layout::padded_column_major, Layout::bsnd_tokens})
      rows.push_back({op, l});
  return rows;
}

std::string layout_name(Layout l) {
  switch (l) {
    case Layout::padded_row_major: return "offset_padded_row_major";
    case Layout::padded_column_major: return "offset_padded_column_major";
    case Layout::bsnd_tokens: return "bsnd_tokens";
  }
  return "";
}

INSTANTIATE_TEST_SUITE_P(Aclnn, Layouts, ::testing::ValuesIn(layout_rows()),
                         [](const ::testing::TestParamInfo<LayoutRow>& info) {
                           return std::string(op_name(info.param.op)) + "_" + layout_name(info.param.layout);
                         });

}  // namespace
}  // namespace aclnn_test
