/* A small CANN-style program: aclnnMhcPre on T=2 tokens, N=2, D=4, with
 * phi = 0 so every output has a closed form (SPEC §2), checked here:
 *   h_pre = sigmoid(bias[0:N]) + hcEps, h_post = 2 sigmoid(bias[N:2N]),
 *   h_res = bias[2N:], h_mix = 0, inv_rms = 1/sqrt(mean(x^2) + normEps),
 *   h_in[d] = sum_n h_pre[n] x[n,d].
 * Valid C99 and C++. Exit code 0 when every number is right. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_mhc_pre.h"

#define T 2
#define N 2
#define D 4
#define F (2 * N + N * N)

static unsigned short to_bf16(float f) { /* exact for the values used here */
  unsigned int u;
  memcpy(&u, &f, 4);
  return (unsigned short)(u >> 16);
}
static float from_bf16(unsigned short h) {
  unsigned int u = (unsigned int)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static double sigmoid(double z) { return 1.0 / (1.0 + exp(-z)); }

static int failures = 0;
static void expect_near(const char *what, int i, double got, double want, double rel) {
  if (fabs(got - want) > rel * fabs(want) + 1e-6) {
    printf("%s[%d]: got %.8f, want %.8f\n", what, i, got, want);
    ++failures;
  }
}

static aclTensor *make(void **dev, const void *host, size_t bytes, const int64_t *dims, uint64_t rank,
                       aclDataType dtype) {
  int64_t strides[4];
  int i;
  if (aclrtMalloc(dev, bytes, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS) return NULL;
  if (host != NULL && aclrtMemcpy(*dev, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE) != ACL_SUCCESS) return NULL;
  strides[rank - 1] = 1;
  for (i = (int)rank - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims[i + 1];
  return aclCreateTensor(dims, rank, dtype, strides, 0, ACL_FORMAT_ND, dims, rank, *dev);
}

int main(void) {
  const double normEps = 1e-6, hcEps = 1e-6;
  unsigned short x[T * N * D], hIn[T * D];
  float xf[T * N * D], phi[F * N * D], alpha[3] = {1.0f, 1.0f, 1.0f}, bias[F];
  float hPost[T * N], hRes[T * N * N], invRms[T], hMix[T * F], hPre[T * N];
  const int64_t xDims[3] = {T, N, D}, phiDims[2] = {F, N * D}, alphaDims[1] = {3}, biasDims[1] = {F};
  const int64_t hInDims[2] = {T, D}, hPostDims[2] = {T, N}, hResDims[3] = {T, N, N}, invDims[1] = {T};
  const int64_t hMixDims[2] = {T, F};
  void *dev[11];
  aclTensor *t[11];
  aclrtContext context;
  aclrtStream stream;
  uint64_t workspaceSize = 0;
  aclOpExecutor *executor = NULL;
  void *workspace = NULL;
  int i, n, d, tok;

  for (tok = 0; tok < T; ++tok)
    for (n = 0; n < N; ++n)
      for (d = 0; d < D; ++d) {
        xf[(tok * N + n) * D + d] = 0.25f * (float)((tok + 1) * (n + 1) * (d + 1)) * (d % 2 ? -1.0f : 1.0f);
        x[(tok * N + n) * D + d] = to_bf16(xf[(tok * N + n) * D + d]);
      }
  memset(phi, 0, sizeof(phi));
  for (i = 0; i < F; ++i) bias[i] = 0.125f * (float)(i - 3);

  if (aclInit(NULL) != ACL_SUCCESS || aclrtSetDevice(0) != ACL_SUCCESS ||
      aclrtCreateContext(&context, 0) != ACL_SUCCESS || aclrtSetCurrentContext(context) != ACL_SUCCESS ||
      aclrtCreateStream(&stream) != ACL_SUCCESS) {
    printf("runtime setup failed: %s\n", aclGetRecentErrMsg());
    return 1;
  }
  t[0] = make(&dev[0], x, sizeof(x), xDims, 3, ACL_BF16);
  t[1] = make(&dev[1], phi, sizeof(phi), phiDims, 2, ACL_FLOAT);
  t[2] = make(&dev[2], alpha, sizeof(alpha), alphaDims, 1, ACL_FLOAT);
  t[3] = make(&dev[3], bias, sizeof(bias), biasDims, 1, ACL_FLOAT);
  t[4] = make(&dev[4], NULL, sizeof(hIn), hInDims, 2, ACL_BF16);
  t[5] = make(&dev[5], NULL, sizeof(hPost), hPostDims, 2, ACL_FLOAT);
  t[6] = make(&dev[6], NULL, sizeof(hRes), hResDims, 3, ACL_FLOAT);
  t[7] = make(&dev[7], NULL, sizeof(invRms), invDims, 1, ACL_FLOAT);
  t[8] = make(&dev[8], NULL, sizeof(hMix), hMixDims, 2, ACL_FLOAT);
  t[9] = make(&dev[9], NULL, sizeof(hPre), hPostDims, 2, ACL_FLOAT);
  for (i = 0; i < 10; ++i)
    if (t[i] == NULL) { printf("tensor %d: %s\n", i, aclGetRecentErrMsg()); return 1; }

  if (aclnnMhcPreGetWorkspaceSize(t[0], t[1], t[2], t[3], NULL, normEps, hcEps, t[4], t[5], t[6], t[7], t[8],
                                  t[9], &workspaceSize, &executor) != ACLNN_SUCCESS) {
    printf("aclnnMhcPreGetWorkspaceSize: %s\n", aclGetRecentErrMsg());
    return 1;
  }
  if (workspaceSize > 0 && aclrtMalloc(&workspace, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS) return 1;
  if (aclnnMhcPre(workspace, workspaceSize, executor, stream) != ACLNN_SUCCESS ||
      aclrtSynchronizeStream(stream) != ACL_SUCCESS) {
    printf("aclnnMhcPre: %s\n", aclGetRecentErrMsg());
    return 1;
  }
  aclrtMemcpy(hIn, sizeof(hIn), dev[4], sizeof(hIn), ACL_MEMCPY_DEVICE_TO_HOST);
  aclrtMemcpy(hPost, sizeof(hPost), dev[5], sizeof(hPost), ACL_MEMCPY_DEVICE_TO_HOST);
  aclrtMemcpy(hRes, sizeof(hRes), dev[6], sizeof(hRes), ACL_MEMCPY_DEVICE_TO_HOST);
  aclrtMemcpy(invRms, sizeof(invRms), dev[7], sizeof(invRms), ACL_MEMCPY_DEVICE_TO_HOST);
  aclrtMemcpy(hMix, sizeof(hMix), dev[8], sizeof(hMix), ACL_MEMCPY_DEVICE_TO_HOST);
  aclrtMemcpy(hPre, sizeof(hPre), dev[9], sizeof(hPre), ACL_MEMCPY_DEVICE_TO_HOST);

  for (tok = 0; tok < T; ++tok) {
    double sumsq = 0.0;
    for (i = 0; i < N * D; ++i) sumsq += (double)xf[tok * N * D + i] * xf[tok * N * D + i];
    expect_near("invRms", tok, invRms[tok], 1.0 / sqrt(sumsq / (N * D) + normEps), 1e-5);
    for (n = 0; n < N; ++n) {
      expect_near("hPre", tok * N + n, hPre[tok * N + n], sigmoid(bias[n]) + hcEps, 1e-5);
      expect_near("hPost", tok * N + n, hPost[tok * N + n], 2.0 * sigmoid(bias[N + n]), 1e-5);
    }
    for (i = 0; i < N * N; ++i) expect_near("hRes", tok * N * N + i, hRes[tok * N * N + i], bias[2 * N + i], 1e-6);
    for (i = 0; i < F; ++i) expect_near("hMix", tok * F + i, hMix[tok * F + i], 0.0, 0.0);
    for (d = 0; d < D; ++d) {
      double want = 0.0;
      for (n = 0; n < N; ++n) want += (sigmoid(bias[n]) + hcEps) * xf[(tok * N + n) * D + d];
      expect_near("hIn", tok * D + d, from_bf16(hIn[tok * D + d]), want, 1.0 / 128);
    }
  }

  for (i = 9; i >= 0; --i) {
    aclDestroyTensor(t[i]);
    aclrtFree(dev[i]);
  }
  if (workspace != NULL) aclrtFree(workspace);
  aclrtDestroyStream(stream);
  aclrtDestroyContext(context);
  aclrtResetDevice(0);
  aclFinalize();
  printf("%s: %d wrong values\n", failures == 0 ? "ok" : "FAILED", failures);
  return failures == 0 ? 0 : 1;
}
