// The cases of the oracle, determinism and strided-view suites, shared with the
// bitwise-identity suite that pins their outputs per kernel family.
#pragma once

#include <tuple>
#include <vector>

#include "test_util.hpp"

namespace mhc_test {

// A spread of N (1..8), D, T, dtypes, layouts, F forms and options (the oracle suite).
inline std::vector<Config> oracle_configs() {
  std::vector<Config> out;
  const DType dtypes[3] = {DType::bf16, DType::fp16, DType::fp32};
  // A spread of N (1..8) and D, with T, dtype, layout, F form and the options rotating.
  const int64_t Ds[] = {1, 7, 64, 100, 512};
  const int64_t Ts[] = {0, 1, 3, 100};
  int i = 0;
  for (int64_t N = 1; N <= 8; ++N)
    for (int64_t D : Ds) {
      Config c;
      c.N = N;
      c.D = D;
      const int64_t T = Ts[(i + N) % 4];
      c.bsnd = i % 2 == 1;
      if (c.bsnd && T % 2 == 0 && T > 0) { c.B = 2; c.S = T / 2; } else { c.B = 1; c.S = T; }
      c.dtype = dtypes[i % 3];
      const FForm forms[3] = {FForm::square, FForm::permutation, FForm::two_entry};
      c.form = forms[(i / 2) % 3];
      if (c.form == FForm::permutation && N > 5) c.form = FForm::square;  // 6! + 12 rows: too slow here
      c.gamma = (i / 3) % 2 == 0;
      c.grad_x_post = (i / 5) % 2 == 1;
      c.caches = i % 7 != 3;
      c.flat_residual = i % 11 == 4;
      c.seed = 100 + i++;
      out.push_back(c);
    }
  // Every dtype x layout x F form x gamma, small, with the other options alternating.
  for (DType dtype : dtypes)
    for (bool bsnd : {false, true})
      for (FForm form : {FForm::square, FForm::permutation, FForm::two_entry})
        for (bool gamma : {false, true}) {
          Config c;
          c.N = 4; c.D = 9; c.dtype = dtype; c.bsnd = bsnd; c.form = form; c.gamma = gamma;
          c.B = bsnd ? 3 : 1; c.S = bsnd ? 2 : 5;
          c.grad_x_post = i % 2 == 0;
          c.caches = i % 3 != 0;
          c.flat_residual = i % 4 == 1;
          c.seed = 100 + i++;
          out.push_back(c);
        }
  // T = 0 in both layouts, and a realistic shape (N = 4, D = 1280).
  for (auto [B, S, bsnd] : {std::tuple{1, 0, false}, {0, 5, true}, {3, 0, true}}) {
    Config c;
    c.N = 4; c.D = 16; c.B = B; c.S = S; c.bsnd = bsnd; c.grad_x_post = true; c.seed = 100 + i++;
    out.push_back(c);
  }
  Config real;
  real.N = 4; real.D = 1280; real.B = 2; real.S = 8; real.bsnd = true; real.dtype = DType::bf16;
  real.grad_x_post = true; real.seed = 100 + i++;
  out.push_back(real);
  // The head (one-entry alpha, F = N): N 1..8, each dtype and layout, with and
  // without gamma, grad_x_post and caches.
  for (int64_t N = 1; N <= 8; ++N) {
    Config c;
    c.form = FForm::head;
    c.N = N; c.D = Ds[N % 5]; c.dtype = dtypes[N % 3];
    c.bsnd = N % 2 == 0;
    const int64_t T = Ts[(N + 1) % 4];
    if (c.bsnd && T % 2 == 0 && T > 0) { c.B = 2; c.S = T / 2; } else { c.B = 1; c.S = T; }
    c.gamma = N % 3 != 1;
    c.grad_x_post = N % 2 == 1;
    c.caches = N != 5;
    c.seed = 100 + i++;
    out.push_back(c);
  }
  // grad_x_post in fp32 with bf16 and fp16 x (MhcPostBackward's fp32 grad_x, fed unrounded).
  for (DType dtype : {DType::bf16, DType::fp16}) {
    Config c;
    c.N = 4; c.D = 300; c.B = 2; c.S = 3; c.bsnd = dtype == DType::bf16; c.dtype = dtype;
    c.grad_x_post = true; c.grad_x_post_fp32 = true; c.seed = 100 + i++;
    out.push_back(c);
  }
  return out;
}

// T = 300 tokens (5 forward items of 64 on the SIMD families, 4 of 96 on amx), K = 640
// (3 column items of 256).
inline std::vector<Config> many_item_configs() {
  std::vector<Config> out;
  for (auto [dtype, form, gamma, bsnd] : {std::tuple{DType::bf16, FForm::square, true, true},
                                          {DType::fp16, FForm::permutation, false, false},
                                          {DType::fp32, FForm::two_entry, true, false}}) {
    Config c;
    c.N = 4; c.D = 160; c.dtype = dtype; c.form = form; c.gamma = gamma; c.grad_x_post = true;
    c.bsnd = bsnd; c.B = bsnd ? 3 : 1; c.S = bsnd ? 100 : 300;
    c.seed = 900 + out.size();
    out.push_back(c);
  }
  return out;
}

// Tokens compared alone and inside a batch (the batch-invariance suite).
inline std::vector<Config> batch_configs() {
  std::vector<Config> out;
  for (auto [dtype, form, gamma, bsnd, D] : {std::tuple{DType::bf16, FForm::square, true, false, int64_t(300)},
                                             {DType::fp16, FForm::permutation, true, true, int64_t(64)},
                                             {DType::fp32, FForm::two_entry, false, false, int64_t(7)},
                                             {DType::bf16, FForm::square, false, true, int64_t(1)},
                                             {DType::bf16, FForm::square, true, false, int64_t(96)},
                                             {DType::bf16, FForm::permutation, true, true, int64_t(200)},
                                             {DType::bf16, FForm::square, true, false, int64_t(4100)}}) {
    Config c;
    c.N = 4; c.D = D; c.dtype = dtype; c.form = form; c.gamma = gamma; c.grad_x_post = true;
    // 600 tokens: four AMX items of 160, the last of 120 (three pairs of 16-token
    // tiles, a tile alone, 8 tokens);
    // 12 tokens: a call the AMX family takes without packing phi (at most 16 tokens);
    // K = 16400 with 520 tokens: the AMX family's 128-token items (more than 8 MiB of
    // x in 256 tokens), with a tail of 8.
    c.bsnd = bsnd; c.B = 1; c.S = D == 96 ? 600 : D == 200 ? 12 : D == 4100 ? 520 : 37;
    c.seed = 950 + out.size();
    out.push_back(c);
  }
  return out;
}

// Shapes relaid in strided layouts (the strided-view suite).
inline std::vector<Config> strided_configs() {
  std::vector<Config> out;
  auto add = [&](int64_t N, int64_t D, int64_t B, int64_t S, bool bsnd, DType dt, FForm form, bool gamma,
                 bool gxp, bool flat) {
    Config c;
    c.N = N; c.D = D; c.B = B; c.S = S; c.bsnd = bsnd; c.dtype = dt; c.form = form; c.gamma = gamma;
    c.grad_x_post = gxp; c.flat_residual = flat; c.seed = 500 + out.size();
    out.push_back(c);
  };
  add(4, 8, 2, 3, true, DType::bf16, FForm::square, true, true, false);
  add(4, 33, 1, 20, false, DType::fp16, FForm::permutation, true, false, false);
  add(3, 5, 3, 7, true, DType::fp32, FForm::two_entry, false, true, false);
  add(2, 300, 1, 5, false, DType::bf16, FForm::square, false, true, true);  // K > one column item
  add(1, 17, 2, 2, true, DType::fp16, FForm::square, true, false, false);
  add(5, 4, 1, 18, false, DType::fp32, FForm::permutation, false, false, false);  // N = 5, R = 5!
  return out;
}

}  // namespace mhc_test
