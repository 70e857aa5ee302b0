// A program written as CANN's published aclnn samples are, built with CANN's
// link line (-lascendcl -lnnopbase -lopapi -lopapi_transformer -lopapi_math
// -lc_sec): aclnnMhcPre, then aclnnMhcPreBackward on its caches, fp16 x held on
// the host as aclFloat16, every output checked against a double-precision
// computation of SPEC §2-§3 written here. Exit code 0 when all agree.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_mhc_pre.h"
#include "aclnnop/aclnn_mhc_pre_backward.h"

#define CHECK_RET(cond, return_expr) \
  do {                               \
    if (!(cond)) {                   \
      return_expr;                   \
    }                                \
  } while (0)

#define LOG_PRINT(message, ...)     \
  do {                              \
    printf(message, ##__VA_ARGS__); \
  } while (0)

namespace {

const int64_t B = 2, S = 4, N = 4, D = 64, T = B * S, K = N * D, F = 2 * N + N * N;
const double kNormEps = 1e-6, kHcEps = 1e-6;

int64_t GetShapeSize(const std::vector<int64_t>& shape) {
  int64_t shapeSize = 1;
  for (auto i : shape) shapeSize *= i;
  return shapeSize;
}

int Init(int32_t deviceId, aclrtStream* stream) {
  auto ret = aclInit(nullptr);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclInit failed. ERROR: %d\n", ret); return ret);
  ret = aclrtSetDevice(deviceId);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSetDevice failed. ERROR: %d\n", ret); return ret);
  ret = aclrtCreateStream(stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtCreateStream failed. ERROR: %d\n", ret); return ret);
  return 0;
}

template <typename Elem>
int CreateAclTensor(const std::vector<Elem>& hostData, const std::vector<int64_t>& shape, void** deviceAddr,
                    aclDataType dataType, aclTensor** tensor) {
  auto size = GetShapeSize(shape) * sizeof(Elem);
  CHECK_RET(aclDataTypeSize(dataType) == sizeof(Elem), LOG_PRINT("aclDataTypeSize mismatch\n"); return -1);
  auto ret = aclrtMalloc(deviceAddr, size, ACL_MEM_MALLOC_HUGE_FIRST);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMalloc failed. ERROR: %d\n", ret); return ret);
  ret = aclrtMemcpy(*deviceAddr, size, hostData.data(), size, ACL_MEMCPY_HOST_TO_DEVICE);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMemcpy failed. ERROR: %d\n", ret); return ret);
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; i--) strides[i] = shape[i + 1] * strides[i + 1];
  *tensor = aclCreateTensor(shape.data(), shape.size(), dataType, strides.data(), 0, aclFormat::ACL_FORMAT_ND,
                            shape.data(), shape.size(), *deviceAddr);
  return *tensor == nullptr ? -1 : 0;
}

template <typename Elem>
int CopyToHost(const void* deviceAddr, std::vector<Elem>* host) {
  const size_t size = host->size() * sizeof(Elem);
  auto ret = aclrtMemcpy(host->data(), size, deviceAddr, size, ACL_MEMCPY_DEVICE_TO_HOST);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("copy result from device to host failed. ERROR: %d\n", ret); return ret);
  return 0;
}

struct Lcg {  // deterministic inputs in [-1, 1)
  uint32_t state;
  double Next() {
    state = state * 1664525u + 1013904223u;
    return static_cast<double>(state >> 8) / 8388608.0 - 1.0;
  }
};

std::vector<float> Uniform(int64_t n, uint32_t seed, double center, double scale) {
  Lcg g{seed};
  std::vector<float> v(n);
  for (auto& e : v) e = static_cast<float>(center + scale * g.Next());
  return v;
}

std::vector<aclFloat16> ToHalf(const std::vector<float>& v) {
  std::vector<aclFloat16> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = aclFloatToFloat16(v[i]);
  return h;
}

std::vector<double> FromHalf(const std::vector<aclFloat16>& h) {
  std::vector<double> v(h.size());
  for (size_t i = 0; i < h.size(); ++i) v[i] = aclFloat16ToFloat(h[i]);
  return v;
}

template <typename Elem>
std::vector<double> ToDouble(const std::vector<Elem>& v) {
  return std::vector<double>(v.begin(), v.end());
}

double Sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// |got - want| <= rtol |want| + atol max|want|, element by element.
int failures = 0;
void Expect(const char* name, const std::vector<double>& got, const std::vector<double>& want, double rtol,
            double atol) {
  double scale = 0, worst = 0;
  for (double w : want) scale = std::fmax(scale, std::fabs(w));
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    worst = std::fmax(worst, err / (scale > 0 ? scale : 1));
    if (!(err <= rtol * std::fabs(want[i]) + atol * scale)) {
      if (bad++ < 3) LOG_PRINT("%s[%zu]: got %.9g, want %.9g\n", name, i, got[i], want[i]);
    }
  }
  LOG_PRINT("%-10s %6zu values, largest error %.3g of max |value| %.3g%s\n", name, want.size(), worst, scale,
            bad ? "  FAILED" : "");
  failures += bad != 0;
}

}  // namespace

int main() {
  int32_t deviceId = 0;
  aclrtStream stream;
  auto ret = Init(deviceId, &stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

  // Host data: x in fp16 (aclFloat16), the parameters in fp32.
  std::vector<aclFloat16> xHost = ToHalf(Uniform(T * K, 1, 0.0, 1.0));
  std::vector<float> phiHost = Uniform(F * K, 2, 0.0, 0.05), alphaHost = Uniform(3, 3, 1.0, 0.3);
  std::vector<float> biasHost = Uniform(F, 4, 0.0, 0.1), gammaHost = Uniform(K, 5, 1.0, 0.1);
  std::vector<aclFloat16> hInHost(T * D);
  std::vector<float> hPostHost(T * N), hResHost(T * N * N), invRmsHost(T), hMixHost(T * F), hPreHost(T * N);

  // Forward: aclnnMhcPre.
  void *xAddr, *phiAddr, *alphaAddr, *biasAddr, *gammaAddr, *hInAddr, *hPostAddr, *hResAddr, *invRmsAddr,
      *hMixAddr, *hPreAddr;
  aclTensor *x, *phi, *alpha, *bias, *gamma, *hIn, *hPost, *hRes, *invRms, *hMix, *hPre;
  ret = CreateAclTensor(xHost, {B, S, N, D}, &xAddr, aclDataType::ACL_FLOAT16, &x);
  ret |= CreateAclTensor(phiHost, {F, K}, &phiAddr, aclDataType::ACL_FLOAT, &phi);
  ret |= CreateAclTensor(alphaHost, {3}, &alphaAddr, aclDataType::ACL_FLOAT, &alpha);
  ret |= CreateAclTensor(biasHost, {F}, &biasAddr, aclDataType::ACL_FLOAT, &bias);
  ret |= CreateAclTensor(gammaHost, {N, D}, &gammaAddr, aclDataType::ACL_FLOAT, &gamma);
  ret |= CreateAclTensor(hInHost, {B, S, D}, &hInAddr, aclDataType::ACL_FLOAT16, &hIn);
  ret |= CreateAclTensor(hPostHost, {B, S, N}, &hPostAddr, aclDataType::ACL_FLOAT, &hPost);
  ret |= CreateAclTensor(hResHost, {B, S, N, N}, &hResAddr, aclDataType::ACL_FLOAT, &hRes);
  ret |= CreateAclTensor(invRmsHost, {B, S}, &invRmsAddr, aclDataType::ACL_FLOAT, &invRms);
  ret |= CreateAclTensor(hMixHost, {B, S, F}, &hMixAddr, aclDataType::ACL_FLOAT, &hMix);
  ret |= CreateAclTensor(hPreHost, {B, S, N}, &hPreAddr, aclDataType::ACL_FLOAT, &hPre);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("CreateAclTensor failed\n"); return 1);

  uint64_t workspaceSize = 0;
  aclOpExecutor* executor;
  ret = aclnnMhcPreGetWorkspaceSize(x, phi, alpha, bias, gamma, kNormEps, kHcEps, hIn, hPost, hRes, invRms, hMix,
                                    hPre, &workspaceSize, &executor);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnMhcPreGetWorkspaceSize failed. ERROR: %d %s\n", ret,
                                          aclGetRecentErrMsg());
            return ret);
  void* workspaceAddr = nullptr;
  if (workspaceSize > 0) {
    ret = aclrtMalloc(&workspaceAddr, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("allocate workspace failed. ERROR: %d\n", ret); return ret);
  }
  ret = aclnnMhcPre(workspaceAddr, workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnMhcPre failed. ERROR: %d %s\n", ret, aclGetRecentErrMsg());
            return ret);
  ret = aclrtSynchronizeStream(stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);
  ret = CopyToHost(hInAddr, &hInHost) | CopyToHost(hPostAddr, &hPostHost) | CopyToHost(hResAddr, &hResHost) |
        CopyToHost(invRmsAddr, &invRmsHost) | CopyToHost(hMixAddr, &hMixHost) | CopyToHost(hPreAddr, &hPreHost);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  // Forward in double (SPEC §2), from the inputs exactly as the program holds them.
  const std::vector<double> v = FromHalf(xHost), p = ToDouble(phiHost), a = ToDouble(alphaHost);
  const std::vector<double> b = ToDouble(biasHost), g = ToDouble(gammaHost);
  std::vector<double> rIn(T * D), rPost(T * N), rRes(T * N * N), rInv(T), rMix(T * F), rPre(T * N);
  for (int64_t t = 0; t < T; ++t) {
    const double* vt = &v[t * K];
    double sq = 0;
    for (int64_t k = 0; k < K; ++k) sq += vt[k] * vt[k];
    const double r = 1.0 / std::sqrt(sq / K + kNormEps);
    rInv[t] = r;
    for (int64_t f = 0; f < F; ++f) {
      double m = 0;
      for (int64_t k = 0; k < K; ++k) m += p[f * K + k] * vt[k] * g[k];
      rMix[t * F + f] = m;
      const double z = (f < N ? a[0] : f < 2 * N ? a[1] : a[2]) * r * m + b[f];
      if (f < N) rPre[t * N + f] = Sigmoid(z) + kHcEps;
      else if (f < 2 * N) rPost[t * N + f - N] = 2 * Sigmoid(z);
      else rRes[t * N * N + f - 2 * N] = z;
    }
    for (int64_t d = 0; d < D; ++d) {
      double s = 0;
      for (int64_t n = 0; n < N; ++n) s += rPre[t * N + n] * vt[n * D + d];
      rIn[t * D + d] = s;
    }
  }
  Expect("invRms", ToDouble(invRmsHost), rInv, 1e-5, 0);
  Expect("hMix", ToDouble(hMixHost), rMix, 1e-4, 2e-6);
  Expect("hPre", ToDouble(hPreHost), rPre, 1e-5, 1e-6);
  Expect("hPost", ToDouble(hPostHost), rPost, 1e-5, 1e-6);
  Expect("hRes", ToDouble(hResHost), rRes, 1e-4, 1e-6);
  Expect("hIn", FromHalf(hInHost), rIn, 1.0 / 512, 1e-4);  // fp16: within one unit in the last place

  // Backward: aclnnMhcPreBackward on the forward's caches; its outputs are const aclTensor *.
  const float hcEpsBackward = static_cast<float>(kHcEps);
  std::vector<aclFloat16> gradHInHost = ToHalf(Uniform(T * D, 6, 0.0, 1.0));
  std::vector<float> gradHPostHost = Uniform(T * N, 7, 0.0, 1.0), gradHResHost = Uniform(T * N * N, 8, 0.0, 1.0);
  std::vector<aclFloat16> gradXPostHost = ToHalf(Uniform(T * K, 9, 0.0, 0.5));
  std::vector<aclFloat16> gradXHost(T * K);
  std::vector<float> gradPhiHost(F * K), gradAlphaHost(3), gradBiasHost(F), gradGammaHost(K);
  void *gradHInAddr, *gradHPostAddr, *gradHResAddr, *gradXPostAddr, *gradXAddr, *gradPhiAddr, *gradAlphaAddr,
      *gradBiasAddr, *gradGammaAddr;
  aclTensor *gradHIn, *gradHPost, *gradHRes, *gradXPost, *outs[5];
  ret = CreateAclTensor(gradHInHost, {B, S, D}, &gradHInAddr, aclDataType::ACL_FLOAT16, &gradHIn);
  ret |= CreateAclTensor(gradHPostHost, {B, S, N}, &gradHPostAddr, aclDataType::ACL_FLOAT, &gradHPost);
  ret |= CreateAclTensor(gradHResHost, {B, S, N, N}, &gradHResAddr, aclDataType::ACL_FLOAT, &gradHRes);
  ret |= CreateAclTensor(gradXPostHost, {B, S, N, D}, &gradXPostAddr, aclDataType::ACL_FLOAT16, &gradXPost);
  ret |= CreateAclTensor(gradXHost, {B, S, N, D}, &gradXAddr, aclDataType::ACL_FLOAT16, &outs[0]);
  ret |= CreateAclTensor(gradPhiHost, {F, K}, &gradPhiAddr, aclDataType::ACL_FLOAT, &outs[1]);
  ret |= CreateAclTensor(gradAlphaHost, {3}, &gradAlphaAddr, aclDataType::ACL_FLOAT, &outs[2]);
  ret |= CreateAclTensor(gradBiasHost, {F}, &gradBiasAddr, aclDataType::ACL_FLOAT, &outs[3]);
  ret |= CreateAclTensor(gradGammaHost, {N, D}, &gradGammaAddr, aclDataType::ACL_FLOAT, &outs[4]);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("CreateAclTensor failed\n"); return 1);
  const aclTensor *gradX = outs[0], *gradPhi = outs[1], *gradAlpha = outs[2], *gradBias = outs[3],
                  *gradGamma = outs[4];

  uint64_t backwardWorkspaceSize = 0;
  aclOpExecutor* backwardExecutor;
  ret = aclnnMhcPreBackwardGetWorkspaceSize(x, phi, alpha, gradHIn, gradHPost, gradHRes, invRms, hMix, hPre, hPost,
                                            gamma, gradXPost, hcEpsBackward, gradX, gradPhi, gradAlpha, gradBias,
                                            gradGamma, &backwardWorkspaceSize, &backwardExecutor);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnMhcPreBackwardGetWorkspaceSize failed. ERROR: %d %s\n", ret,
                                          aclGetRecentErrMsg());
            return ret);
  void* backwardWorkspaceAddr = nullptr;
  if (backwardWorkspaceSize > 0) {
    ret = aclrtMalloc(&backwardWorkspaceAddr, backwardWorkspaceSize, ACL_MEM_MALLOC_HUGE_FIRST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("allocate workspace failed. ERROR: %d\n", ret); return ret);
  }
  ret = aclnnMhcPreBackward(backwardWorkspaceAddr, backwardWorkspaceSize, backwardExecutor, stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnMhcPreBackward failed. ERROR: %d %s\n", ret, aclGetRecentErrMsg());
            return ret);
  ret = aclrtSynchronizeStream(stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);
  ret = CopyToHost(gradXAddr, &gradXHost) | CopyToHost(gradPhiAddr, &gradPhiHost) |
        CopyToHost(gradAlphaAddr, &gradAlphaHost) | CopyToHost(gradBiasAddr, &gradBiasHost) |
        CopyToHost(gradGammaAddr, &gradGammaHost);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  // Backward in double (SPEC §3), from the inputs as given (the caches as the forward wrote them).
  const std::vector<double> ghIn = FromHalf(gradHInHost), ghPost = ToDouble(gradHPostHost);
  const std::vector<double> ghRes = ToDouble(gradHResHost), gxPost = FromHalf(gradXPostHost);
  const std::vector<double> inv = ToDouble(invRmsHost), mix = ToDouble(hMixHost), pre = ToDouble(hPreHost);
  const std::vector<double> post = ToDouble(hPostHost);
  const double hc = hcEpsBackward;
  std::vector<double> rGx(T * K), rGphi(F * K, 0.0), rGalpha(3, 0.0), rGbias(F, 0.0), rGgamma(K, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    const double* vt = &v[t * K];
    const double r = inv[t];
    std::vector<double> gz(F), G(F), gu(K, 0.0);
    double gr = 0;
    for (int64_t f = 0; f < F; ++f) {
      if (f < N) {
        double gp = 0;
        for (int64_t d = 0; d < D; ++d) gp += vt[f * D + d] * ghIn[t * D + d];
        const double s = pre[t * N + f] - hc;
        gz[f] = gp * s * (1 - s);
      } else if (f < 2 * N) {
        const double hp = post[t * N + f - N];
        gz[f] = ghPost[t * N + f - N] * hp * (1 - hp / 2);
      } else {
        gz[f] = ghRes[t * N * N + f - 2 * N];
      }
      const int branch = f < N ? 0 : f < 2 * N ? 1 : 2;
      const double gw = a[branch] * gz[f], m = mix[t * F + f];
      G[f] = r * gw;
      gr += gw * m;
      rGbias[f] += gz[f];
      rGalpha[branch] += gz[f] * r * m;
    }
    for (int64_t f = 0; f < F; ++f)
      for (int64_t k = 0; k < K; ++k) {
        gu[k] += p[f * K + k] * G[f];
        rGphi[f * K + k] += G[f] * vt[k] * g[k];
      }
    const double c = -r * r * r * gr / K;
    for (int64_t k = 0; k < K; ++k) {
      const int64_t n = k / D, d = k % D;
      rGx[t * K + k] = pre[t * N + n] * ghIn[t * D + d] + g[k] * gu[k] + c * vt[k] + gxPost[t * K + k];
      rGgamma[k] += vt[k] * gu[k];
    }
  }
  Expect("gradX", FromHalf(gradXHost), rGx, 1.0 / 512, 1e-4);  // fp16
  Expect("gradPhi", ToDouble(gradPhiHost), rGphi, 1e-4, 2e-6);
  Expect("gradAlpha", ToDouble(gradAlphaHost), rGalpha, 1e-4, 2e-6);
  Expect("gradBias", ToDouble(gradBiasHost), rGbias, 1e-4, 2e-6);
  Expect("gradGamma", ToDouble(gradGammaHost), rGgamma, 1e-4, 2e-6);

  // Release, as CANN's samples do.
  const std::vector<const aclTensor*> tensors = {x,       phi,       alpha,    bias,      gamma,   hIn,
                                                 hPost,   hRes,      invRms,   hMix,      hPre,    gradHIn,
                                                 gradHPost, gradHRes, gradXPost, gradX,   gradPhi, gradAlpha,
                                                 gradBias, gradGamma};
  for (const aclTensor* t : tensors) aclDestroyTensor(t);
  for (void* addr : {xAddr, phiAddr, alphaAddr, biasAddr, gammaAddr, hInAddr, hPostAddr, hResAddr, invRmsAddr,
                     hMixAddr, hPreAddr, gradHInAddr, gradHPostAddr, gradHResAddr, gradXPostAddr, gradXAddr,
                     gradPhiAddr, gradAlphaAddr, gradBiasAddr, gradGammaAddr})
    aclrtFree(addr);
  if (workspaceSize > 0) aclrtFree(workspaceAddr);
  if (backwardWorkspaceSize > 0) aclrtFree(backwardWorkspaceAddr);
  aclrtDestroyStream(stream);
  aclrtResetDevice(deviceId);
  aclFinalize();
  if (failures != 0) {
    LOG_PRINT("%d outputs FAILED\n", failures);
    return 1;
  }
  LOG_PRINT("all outputs agree with the double-precision computation\n");
  return 0;
}
