// Tensor elements in JSON: the "data" member of a KServe v2 tensor (flat or nested arrays, row
// major) to raw bytes and back. Floats are written as the shortest decimal that reads back to the
// same double (std::to_chars), so an FP32 or FP64 value survives the round trip bit for bit.
// Parsed with simdjson: an image request is 150,000 numbers, which nlohmann's lexer took 35 ms to
// read here and simdjson a few (both round correctly).
#pragma once

#include <string>

#include "tensor.h"

namespace simdjson::dom {
class element;
}

namespace memoplan::serve {

// Fills tensor.bytes from `data` for tensor.datatype and tensor.shape. Throws HttpError 400 when
// an element has the wrong JSON type or is out of the datatype's range, or when the element count
// differs from the shape's.
void decode_json_data(const simdjson::dom::element& data, HostTensor& tensor);

// Appends tensor's elements as one flat JSON array. NaN and infinities, which JSON cannot spell,
// are written as null.
void append_json_data(const HostTensor& tensor, std::string& out);

}  // namespace memoplan::serve
