/* log.c: the library's log sink: stderr by default, or the program's handler. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

int wd_log_threshold = WD_LOG_WARNING;
static void (*log_handler)(int level, const char *msg);

void wd_log_set(int level, void (*handler)(int level, const char *msg))
{
	wd_log_threshold = level;
	log_handler = handler;
}

void wd_log_vsink(int level, void (*sink)(int level, const char *msg), const char *fmt, va_list ap)
{
	char msg[WD_LOG_LINE_MAX];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	sink(level, msg);
}

static void to_stderr(int level, const char *msg)
{
	(void)level;
	fprintf(stderr, "wdrift: %s\n", msg);
}

void wd_log_emit(int level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	wd_log_vsink(level, log_handler ? log_handler : to_stderr, fmt, ap);
	va_end(ap);
}

const char *wd_log_clip(char *buf, size_t size, const char *s, size_t max)
{
	size_t o = 0, i;

	for (i = 0; s[i] && i < max && o + 6 < size; i++) {
		unsigned char c = (unsigned char)s[i], d = (unsigned char)s[i + 1];
		if (c == 0xc2 && d >= 0x80 && d <= 0x9f) {	/* C1: a terminal takes CSI and OSC from it */
			o += (size_t)snprintf(buf + o, size - o, "\\x%02x", d);
			i++;
		} else if (c < 0x20 || c == 0x7f || c == '\\') {
			o += (size_t)snprintf(buf + o, size - o, c == '\n' ? "\\n" : c == '\r' ? "\\r" :
					      c == '\t' ? "\\t" : c == '\\' ? "\\\\" : "\\x%02x", c);
		} else {
			buf[o++] = (char)c;
		}
	}
	if (s[i] && o + 4 <= size) {
		memcpy(buf + o, "...", 3);
		o += 3;
	}
	buf[o] = 0;
	return buf;
}
