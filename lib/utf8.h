/*
 * utf8.h: text cut to fit a buffer (a name clipped by "%.80s") may end, or
 * hold, part of a UTF-8 character; JSON cannot carry that (jansson's
 * json_string refuses it, and a reply or a drift query lost its field).
 */
#ifndef WD_UTF8_H
#define WD_UTF8_H

/* Replaces each byte of s that is not part of a whole, valid UTF-8 character by '?'. Returns s. */
char *wd_utf8_scrub(char *s);

#endif
