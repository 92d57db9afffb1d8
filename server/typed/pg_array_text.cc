#include "server/typed/pg_array_text.h"

#include <cstddef>
#include <utility>

#include "absl/strings/match.h"

namespace walfeed::server::typed {
namespace {

constexpr int kMaxDimensions = 6;  // PostgreSQL's MAXDIM.

class Parser {
 public:
  explicit Parser(absl::string_view text) : text_(text) {}

  bool ParseAll(ArrayText* out) { return Array(1, out) && pos_ == text_.size(); }

 private:
  bool Take(char c) {
    if (pos_ >= text_.size() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  bool Peek(char c) const { return pos_ < text_.size() && text_[pos_] == c; }

  // "{" items "}" where every item is an array or every item an element.
  bool Array(int depth, ArrayText* out) {
    if (depth > kMaxDimensions || !Take('{')) return false;
    if (Take('}')) return true;
    const bool nested = Peek('{');
    do {
      if (nested) {
        out->arrays.emplace_back();
        if (!Array(depth + 1, &out->arrays.back())) return false;
      } else {
        out->elements.emplace_back();
        if (!Element(&out->elements.back())) return false;
      }
    } while (Take(','));
    return Take('}');
  }

  bool Element(ArrayText::Element* out) {
    if (Take('"')) {
      while (pos_ < text_.size() && text_[pos_] != '"') {
        if (text_[pos_] == '\\') {
          if (++pos_ >= text_.size()) return false;
        }
        out->text.push_back(text_[pos_++]);
      }
      return Take('"');
    }
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] != ',' && text_[pos_] != '}' &&
           text_[pos_] != '{' && text_[pos_] != '"' && text_[pos_] != '\\') {
      ++pos_;
    }
    out->text = std::string(text_.substr(start, pos_ - start));
    if (out->text.empty()) return false;  // array_out quotes empty strings.
    out->null = absl::EqualsIgnoreCase(out->text, "NULL");
    if (out->null) out->text.clear();
    return true;
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

std::optional<ArrayText> ParseArrayText(absl::string_view text) {
  ArrayText out;
  if (!Parser(text).ParseAll(&out)) return std::nullopt;
  return out;
}

}  // namespace walfeed::server::typed
