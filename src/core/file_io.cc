// Whole-file reads and writes, gzip-aware. Traces of 100k rows are a few MB: reading whole files
// keeps parsing simple and fast.
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "memoplan/trace_io.h"

namespace memoplan {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_gzip(const std::string& bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

Result<std::string> gunzip(const std::string& bytes, const std::string& path) {
  z_stream stream{};
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) return Error{path + ": cannot start gunzip"};
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  stream.avail_in = static_cast<uInt>(bytes.size());
  std::string out;
  char buffer[1 << 16];
  int status = Z_OK;
  while (status != Z_STREAM_END) {
    stream.next_out = reinterpret_cast<Bytef*>(buffer);
    stream.avail_out = sizeof buffer;
    status = inflate(&stream, Z_NO_FLUSH);
    if (status != Z_OK && status != Z_STREAM_END) {
      inflateEnd(&stream);
      if (status == Z_BUF_ERROR) return Error{path + ": gzip data is truncated"};
      return Error{path + ": gzip data is corrupt (" + (stream.msg ? stream.msg : "zlib error") +
                   ")"};
    }
    out.append(buffer, sizeof buffer - stream.avail_out);
  }
  inflateEnd(&stream);
  return out;
}

Result<std::string> gzip(const std::string& text, const std::string& path) {
  z_stream stream{};
  if (deflateInit2(&stream, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return Error{path + ": cannot start gzip"};
  }
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  stream.avail_in = static_cast<uInt>(text.size());
  std::string out;
  char buffer[1 << 16];
  int status = Z_OK;
  while (status != Z_STREAM_END) {
    stream.next_out = reinterpret_cast<Bytef*>(buffer);
    stream.avail_out = sizeof buffer;
    status = deflate(&stream, Z_FINISH);
    if (status == Z_STREAM_ERROR) {
      deflateEnd(&stream);
      return Error{path + ": gzip failed"};
    }
    out.append(buffer, sizeof buffer - stream.avail_out);
  }
  deflateEnd(&stream);
  return out;
}

}  // namespace

Result<std::string> read_file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{path + ": cannot open (" + std::strerror(errno) + ")"};
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return Error{path + ": read failed"};
  std::string bytes = std::move(buffer).str();
  if (is_gzip(bytes)) return gunzip(bytes, path);
  return bytes;
}

std::string write_file_text(const std::string& path, const std::string& text) {
  std::string bytes = text;
  if (ends_with(path, ".gz")) {
    Result<std::string> packed = gzip(text, path);
    if (!packed) return packed.error();
    bytes = std::move(packed).value();
  }
  // Write beside the target and rename, so a crash never leaves a half-written plan behind.
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) return path + ": cannot open for writing (" + std::strerror(errno) + ")";
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) return path + ": write failed (" + std::strerror(errno) + ")";
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    return path + ": cannot rename into place (" + std::strerror(errno) + ")";
  }
  return {};
}

}  // namespace memoplan
