/*
 * test_utf8.c: lib/utf8.c, the scrub that makes cut text fit for JSON. A
 * name cut inside a character (the daemon's "%.80s" of a tensor name, in
 * an expired step's reason) made json_string refuse the whole sentence,
 * and `wdrift drift` failed (a review). Valid text is kept byte for byte;
 * every byte of a cut, overlong, surrogate or out-of-range sequence
 * becomes '?', and what follows it is kept.
 */
#include <jansson.h>
#include <string.h>

#include "harness.h"
#include "utf8.h"

int main(void)
{
	static const struct {
		const char *in, *out, *what;
	} cases[] = {
		{ "", "", "empty" },
		{ "plain ascii", "plain ascii", "ASCII" },
		{ "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
		  "2, 3 and 4 bytes, whole" },
		{ "name \xc3", "name ?", "a 2-byte character cut at the end" },
		{ "w\xe2\x82; and more", "w??; and more", "a 3-byte character cut inside, text after it" },
		{ "\xf0\x9f\x98", "???", "a 4-byte character cut" },
		{ "\xc0\xaf", "??", "an overlong '/'" },
		{ "\xed\xa0\x80", "???", "a surrogate" },
		{ "\xf4\x90\x80\x80", "????", "past U+10FFFF" },
		{ "\x80x", "?x", "a lone continuation byte" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char buf[64];
		snprintf(buf, sizeof(buf), "%s", cases[i].in);
		wd_utf8_scrub(buf);
		json_t *j = json_string(buf);
		CHECK(!strcmp(buf, cases[i].out) && j, "%s: '%s'", cases[i].what, buf);
		json_decref(j);
	}
	return tap_done();
}
