#pragma once
// Server-sent events and OpenAI answer bodies, as the tests read them.
#include <string>
#include <vector>

namespace pdr::test {

// The payloads of the "data: X" events of an SSE body (without the prefix), in order.
std::vector<std::string> sse_data(const std::string& body);
// The concatenated generated text of a completion/chat answer, stream or not. For streams, the
// events' choices[0].text or choices[0].delta.content. Sets `error` on unparsable input.
std::string answer_text(const std::string& body, bool stream, bool chat, std::string& error);

}  // namespace pdr::test
