#include "xml_tree.h"

#include <cctype>
#include <cstdlib>

namespace memoplan::testing {
namespace {

class XmlReader {
 public:
  explicit XmlReader(const std::string& text) : s_(text) {}

  std::unique_ptr<Element> document(std::string& error) {
    skip_space();
    if (s_.compare(i_, 5, "<?xml") == 0) i_ = s_.find("?>", i_) + 2;
    skip_space();
    auto root = element();
    skip_space();
    if (root && i_ != s_.size()) fail("content after the root element");
    error = error_;
    return error_.empty() ? std::move(root) : nullptr;
  }

 private:
  void fail(const std::string& what) {
    if (error_.empty()) error_ = what + " at byte " + std::to_string(i_);
  }
  void skip_space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  std::string name() {
    const size_t start = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '-' ||
                              s_[i_] == ':' || s_[i_] == '_')) {
      ++i_;
    }
    if (start == i_) fail("expected a name");
    return s_.substr(start, i_ - start);
  }
  // Decodes character data up to `stop`, rejecting raw '<' and unknown entities.
  std::string characters(char stop) {
    static const std::map<std::string, std::string> kEntities = {
        {"amp", "&"}, {"lt", "<"}, {"gt", ">"}, {"quot", "\""}, {"apos", "'"}};
    std::string out;
    while (i_ < s_.size() && s_[i_] != stop) {
      if (s_[i_] == '<') return fail("raw '<' in an attribute"), out;
      if (s_[i_] != '&') {
        out += s_[i_++];
        continue;
      }
      const size_t semicolon = s_.find(';', i_);
      auto entity = kEntities.find(s_.substr(i_ + 1, semicolon - i_ - 1));
      if (semicolon == std::string::npos || entity == kEntities.end()) {
        return fail("bad entity"), out;
      }
      out += entity->second;
      i_ = semicolon + 1;
    }
    return out;
  }
  std::unique_ptr<Element> element() {
    if (i_ >= s_.size() || s_[i_] != '<') return fail("expected '<'"), nullptr;
    ++i_;
    auto node = std::make_unique<Element>();
    node->name = name();
    for (;;) {
      skip_space();
      if (!error_.empty() || i_ >= s_.size()) return fail("unterminated tag"), nullptr;
      if (s_.compare(i_, 2, "/>") == 0) return i_ += 2, std::move(node);
      if (s_[i_] == '>') break;
      const std::string key = name();
      if (s_.compare(i_, 2, "=\"") != 0) return fail("attribute without quotes"), nullptr;
      i_ += 2;
      std::string value = characters('"');
      if (i_ >= s_.size()) return fail("unterminated attribute"), nullptr;
      ++i_;
      if (!node->attributes.emplace(key, value).second) return fail("repeated attribute"), nullptr;
    }
    ++i_;
    while (error_.empty()) {
      node->text += characters('<');
      if (i_ >= s_.size()) return fail("unclosed <" + node->name + ">"), nullptr;
      if (s_.compare(i_, 2, "</") == 0) {
        i_ += 2;
        if (name() != node->name || i_ >= s_.size() || s_[i_] != '>') {
          return fail("mismatched </...> for <" + node->name + ">"), nullptr;
        }
        ++i_;
        return node;
      }
      auto child = element();
      if (!child) return nullptr;
      node->children.push_back(std::move(child));
    }
    return nullptr;
  }

  const std::string& s_;
  size_t i_ = 0;
  std::string error_;
};

}  // namespace

std::unique_ptr<Element> parse_xml(const std::string& text, std::string& error) {
  return XmlReader(text).document(error);
}

}  // namespace memoplan::testing
