// Reads the dumps the aclnn samples write (inputs and outputs), runs the same
// inputs through the C++ API (mhc::pre_forward / mhc::pre_backward) and checks
// that every output agrees bit for bit.
//
// Usage: aclnn_example_agreement forward|backward dump.bin
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "mhc/mhc.hpp"

namespace {

struct Record {
  int32_t acl_dtype = 0;
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;
};

bool read_dump(const char* path, std::map<std::string, Record>* records) {
  std::ifstream in(path, std::ios::binary);
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "MHCDUMP1", 8) != 0) return false;
  uint32_t name_len;
  while (in.read(reinterpret_cast<char*>(&name_len), 4)) {
    std::string name(name_len, '\0');
    Record r;
    uint32_t rank;
    uint64_t nbytes;
    in.read(name.data(), name_len);
    in.read(reinterpret_cast<char*>(&r.acl_dtype), 4);
    in.read(reinterpret_cast<char*>(&rank), 4);
    r.dims.resize(rank);
    in.read(reinterpret_cast<char*>(r.dims.data()), 8 * rank);
    in.read(reinterpret_cast<char*>(&nbytes), 8);
    r.bytes.resize(nbytes);
    in.read(reinterpret_cast<char*>(r.bytes.data()), std::streamsize(nbytes));
    if (!in) return false;
    (*records)[name] = std::move(r);
  }
  return true;
}

class Dump {
 public:
  explicit Dump(std::map<std::string, Record> records) : records_(std::move(records)) {}

  bool has(const std::string& name) const { return records_.count(name) != 0; }
  // A contiguous view over the dumped bytes (inputs).
  mhc::TensorView input(const std::string& name) { return view(records_.at(name), records_.at(name).bytes.data()); }
  // A contiguous view over a fresh buffer of the dumped output's size.
  mhc::TensorView output(const std::string& name) {
    Record& r = records_.at(name);
    fresh_[name].assign(r.bytes.size(), 0x5A);
    return view(r, fresh_[name].data());
  }
  double scalar(const std::string& name) const {
    const Record& r = records_.at(name);
    if (r.bytes.size() == 8) { double d; std::memcpy(&d, r.bytes.data(), 8); return d; }
    float f;
    std::memcpy(&f, r.bytes.data(), 4);
    return f;
  }
  // Every output computed by the C++ API equals the sample's, bit for bit.
  int compare() const {
    int mismatches = 0;
    for (const auto& [name, bytes] : fresh_) {
      const bool same = bytes == records_.at(name).bytes;
      std::printf("%-10s %zu bytes: %s\n", name.c_str(), bytes.size(), same ? "identical" : "DIFFERENT");
      mismatches += same ? 0 : 1;
    }
    return mismatches;
  }

 private:
  static mhc::TensorView view(const Record& r, const void* data) {
    mhc::TensorView v;
    v.data = const_cast<void*>(data);
    v.dtype = r.acl_dtype == 27 ? mhc::DType::bf16 : r.acl_dtype == 1 ? mhc::DType::fp16 : mhc::DType::fp32;
    v.rank = int32_t(r.dims.size());
    int64_t stride = 1;
    for (int i = v.rank - 1; i >= 0; --i) {
      v.shape[i] = r.dims[i];
      v.strides[i] = stride;
      stride *= r.dims[i];
    }
    return v;
  }
  std::map<std::string, Record> records_;
  std::map<std::string, std::vector<uint8_t>> fresh_;
};

int check_forward(Dump& d) {
  mhc::PreForwardInputs in{d.input("x"), d.input("phi"), d.input("alpha"), d.input("bias"), d.input("gamma")};
  mhc::PreForwardOutputs out{d.output("hIn"), d.output("hPost"), d.output("hRes"),
                             d.output("invRms"), d.output("hMix"), d.output("hPre")};
  mhc::Options options;
  options.norm_eps = d.scalar("normEps");
  options.hc_eps = d.scalar("hcEps");
  const mhc::Status s = mhc::pre_forward(in, out, options);
  if (!s.ok()) { std::printf("pre_forward failed: %s\n", s.message().c_str()); return 1; }
  return d.compare();
}

int check_backward(Dump& d) {
  mhc::PreBackwardInputs in{d.input("x"), d.input("phi"), d.input("alpha"), d.input("gradHIn"),
                            d.input("gradHPost"), d.input("gradHRes"), d.input("invRms"), d.input("hMix"),
                            d.input("hPre"), d.input("hPost"), d.input("gamma"), d.input("gradXPost")};
  mhc::PreBackwardOutputs out{d.output("gradX"), d.output("gradPhi"), d.output("gradAlpha"),
                              d.output("gradBias"), d.output("gradGamma")};
  mhc::Options options;
  options.hc_eps = d.scalar("hcEps");
  const mhc::Status s = mhc::pre_backward(in, out, options);
  if (!s.ok()) { std::printf("pre_backward failed: %s\n", s.message().c_str()); return 1; }
  return d.compare();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) { std::printf("usage: %s forward|backward dump.bin\n", argv[0]); return 2; }
  std::map<std::string, Record> records;
  if (!read_dump(argv[2], &records)) { std::printf("cannot read dump %s\n", argv[2]); return 2; }
  Dump dump(std::move(records));
  const std::string which = argv[1];
  const int mismatches = which == "forward" ? check_forward(dump) : check_backward(dump);
  std::printf("%s\n", mismatches == 0 ? "all outputs identical to the C++ API" : "MISMATCH");
  return mismatches == 0 ? 0 : 1;
}
