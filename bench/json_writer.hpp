// A minimal streaming JSON writer (objects, arrays, strings, numbers, bools,
// null), enough for mhc-bench's results file. Non-finite numbers become null.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace mhc_bench {

class JsonWriter {
 public:
  JsonWriter& begin_object() { open('{'); return *this; }
  JsonWriter& end_object() { close('}'); return *this; }
  JsonWriter& begin_array() { open('['); return *this; }
  JsonWriter& end_array() { close(']'); return *this; }

  JsonWriter& key(const std::string& k) {
    separate();
    quote(k);
    out_ += ": ";
    after_key_ = true;
    return *this;
  }
  JsonWriter& value(const std::string& s) { separate(); quote(s); return *this; }
  JsonWriter& value(const char* s) { return value(std::string(s)); }
  JsonWriter& value(bool b) { separate(); out_ += b ? "true" : "false"; return *this; }
  JsonWriter& value(int v) { return value(int64_t(v)); }
  JsonWriter& value(int64_t v) { separate(); out_ += std::to_string(v); return *this; }
  JsonWriter& value(double v) {
    separate();
    out_ += format(v);
    return *this;
  }
  JsonWriter& null() { separate(); out_ += "null"; return *this; }
  template <class T>
  JsonWriter& field(const std::string& k, const T& v) { key(k); return value(v); }
  // A list of numbers on one line.
  JsonWriter& numbers(const std::vector<double>& values) {
    separate();
    out_ += '[';
    for (size_t i = 0; i < values.size(); ++i) {
      if (i) out_ += ", ";
      out_ += format(values[i]);
    }
    out_ += ']';
    return *this;
  }

  const std::string& str() const { return out_; }
  bool write_file(const std::string& path) const {
    FILE* f = std::fopen(path.c_str(), "w");
    if (!f) return false;
    const bool ok = std::fwrite(out_.data(), 1, out_.size(), f) == out_.size();
    return (std::fclose(f) == 0) && ok;
  }

 private:
  static std::string format(double v) {
    if (!std::isfinite(v)) return "null";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return buf;
  }
  void open(char c) {
    separate();
    out_ += c;
    first_.push_back(true);
  }
  void close(char c) {
    const bool empty = first_.back();
    first_.pop_back();
    if (!empty) newline();
    out_ += c;
    if (first_.empty()) out_ += '\n';
  }
  void separate() {
    if (after_key_) { after_key_ = false; return; }
    if (first_.empty()) return;
    if (!first_.back()) out_ += ',';
    first_.back() = false;
    newline();
  }
  void newline() {
    out_ += '\n';
    out_.append(2 * first_.size(), ' ');
  }
  void quote(const std::string& s) {
    out_ += '"';
    for (char c : s) {
      if (c == '"' || c == '\\') { out_ += '\\'; out_ += c; }
      else if (static_cast<unsigned char>(c) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out_ += buf;
      } else out_ += c;
    }
    out_ += '"';
  }

  std::string out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

}  // namespace mhc_bench
