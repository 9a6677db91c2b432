// Test support: SVG (XML) documents as trees, so tests look at elements instead of grepping text.
// A strict little XML reader: it rejects what a real parser rejects in our output (unbalanced or
// unclosed tags, unquoted attributes, a raw '<' or '&' in text, unknown entities), so a document it
// accepts is well-formed, and the tree lets tests look at elements instead of grepping text.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace memoplan::testing {

struct Element {
  std::string name;
  std::map<std::string, std::string> attributes;
  std::string text;  // character data directly inside, entities decoded
  std::vector<std::unique_ptr<Element>> children;

  const Element* find_id(const std::string& id) const {
    auto it = attributes.find("id");
    if (it != attributes.end() && it->second == id) return this;
    for (const auto& child : children) {
      if (const Element* found = child->find_id(id)) return found;
    }
    return nullptr;
  }
  void collect(const std::string& tag, std::vector<const Element*>& out) const {
    if (name == tag) out.push_back(this);
    for (const auto& child : children) child->collect(tag, out);
  }
  std::vector<const Element*> all(const std::string& tag) const {
    std::vector<const Element*> out;
    collect(tag, out);
    return out;
  }
  double number(const std::string& attribute) const { return std::stod(attributes.at(attribute)); }
};

// The document's root element, or nullptr with the first problem in `error`.
std::unique_ptr<Element> parse_xml(const std::string& text, std::string& error);

}  // namespace memoplan::testing
