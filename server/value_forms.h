// ApplyValueForm: a converted ChangeEvent's values in another value form
// (SubscribeRequest.value_form). The row writer makes the same bytes directly
// (tests compare the two); this is the path for events held in the full text
// form only, such as those read back from the spill, and the tests' reference.
#ifndef WALFEED_SERVER_VALUE_FORMS_H_
#define WALFEED_SERVER_VALUE_FORMS_H_

#include <string>

#include "server/event_forms.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::server {

// Sets each text value's `typed` (VALUE_FORM_TYPED and _BOTH) from its column's
// type, and clears the text where `typed` now carries the value
// (VALUE_FORM_TYPED). kText changes nothing.
void ApplyValueForm(ValueForm form, walfeed::v1::ChangeEvent* event);

// The serialized full-text form `full` in `form` (not compact: a session that
// asked for the compact form gets such events in the full one, which its
// client reads as well). False when `full` does not parse.
bool TranscodeFull(const std::string& full, ValueForm form, std::string* out);

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_VALUE_FORMS_H_
