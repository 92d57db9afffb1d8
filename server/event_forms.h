// The forms a row event is sent in: SubscribeRequest.event_form (full or
// compact: column metadata in every event or once per relation version) times
// SubscribeRequest.value_form (text, typed, or both). The full form with text
// values is the one every event has (BufferedEvent::serialized); the others
// are made only while some session wants them, once per event for all such
// sessions.
#ifndef WALFEED_SERVER_EVENT_FORMS_H_
#define WALFEED_SERVER_EVENT_FORMS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace walfeed::server {

enum class ValueForm : uint8_t { kText = 0, kTyped = 1, kBoth = 2 };

struct EventForm {
  bool compact = false;
  ValueForm values = ValueForm::kText;

  static constexpr int kCount = 6;
  // 0 is the full form with text values.
  int index() const { return (compact ? 3 : 0) + static_cast<int>(values); }
  static EventForm At(int index) {
    return EventForm{index >= 3, static_cast<ValueForm>(index % 3)};
  }
  bool operator==(const EventForm& other) const { return index() == other.index(); }
};

// A set of forms, bit i for EventForm::At(i).
using FormMask = uint8_t;
inline FormMask MaskOf(EventForm form) { return static_cast<FormMask>(1u << form.index()); }

// A row event in the forms other than the full text one that were wanted when
// it was converted.
struct EventForms {
  // By EventForm::index(); [0] stays empty (BufferedEvent::serialized holds
  // it), and so does every form that was not wanted.
  std::array<std::string, EventForm::kCount> serialized;
  // The compact forms' RelationShape: its ref, and the serialized shape,
  // shared by the events of one relation version.
  uint32_t shape_ref = 0;
  std::shared_ptr<const std::string> shape;

  // What the forms cost in memory beyond BufferedEvent.
  size_t bytes() const {
    size_t total = sizeof(EventForms);
    for (const std::string& form : serialized) total += form.size();
    return total;
  }
};

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_EVENT_FORMS_H_
