// Driver I/O shared by the host emulations (tests/native/*_host_emulation.cpp): a run directory
// holds params.txt ("key value" lines) and raw little-endian tensors, one file each.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

namespace emu {

inline std::map<std::string, std::string> read_params(const std::string& dir) {
  std::ifstream f(dir + "/params.txt");
  std::map<std::string, std::string> m;
  std::string k, v;
  while (f >> k >> v) m[k] = v;
  return m;
}

inline std::vector<char> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(2);
  }
  return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

inline void write_file(const std::string& path, const void* data, size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), std::streamsize(n));
}

// The run directory of `prog DIR`: get(key) is a parameter ("none" when absent), ptr(key) the tensor
// file that parameter names, read once and kept (nullptr when absent).
struct RunDir {
  std::string dir;
  std::map<std::string, std::string> prm;
  std::map<std::string, std::vector<char>> bufs;

  RunDir(int argc, char** argv) {
    if (argc != 2) {
      std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
      std::exit(2);
    }
    dir = argv[1];
    prm = read_params(dir);
  }
  std::string get(const char* k) const {
    const auto it = prm.find(k);
    return it == prm.end() ? std::string("none") : it->second;
  }
  void* ptr(const char* k) {
    const std::string f = get(k);
    if (f == "none") return nullptr;
    bufs[k] = read_file(dir + "/" + f);
    return bufs[k].data();
  }
};

}  // namespace emu
