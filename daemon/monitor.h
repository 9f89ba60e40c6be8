/*
 * monitor.h: one event of a ZeroMQ socket monitor (zmq_socket_monitor), as
 * libzmq 4.3 sends it: a frame of 6 bytes, [uint16 event][uint32 value],
 * then the endpoint. auth.c and peers.c each read the monitors they own.
 */
#ifndef WD_MONITOR_H
#define WD_MONITOR_H

#include <stdint.h>
#include <string.h>
#include <zmq.h>

/*
 * Reads the next event waiting on pair, without waiting: 1 with event,
 * value and endpoint (keeps it unchanged when the event has none) filled;
 * 0 when none waits. Malformed events are skipped.
 */
static inline int monitor_recv(void *pair, uint16_t *event, uint32_t *value, char *endpoint,
			       size_t size)
{
	for (;;) {
		zmq_msg_t head, addr;
		int ok;

		zmq_msg_init(&head);
		if (zmq_msg_recv(&head, pair, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&head);
			return 0;
		}
		zmq_msg_init(&addr);
		if (zmq_msg_more(&head) && zmq_msg_recv(&addr, pair, 0) >= 0 && size) {
			size_t len = zmq_msg_size(&addr) < size ? zmq_msg_size(&addr) : size - 1;
			memcpy(endpoint, zmq_msg_data(&addr), len);
			endpoint[len] = 0;
		}
		if ((ok = zmq_msg_size(&head) == 6)) {
			memcpy(event, zmq_msg_data(&head), 2);
			memcpy(value, (char *)zmq_msg_data(&head) + 2, 4);
		}
		zmq_msg_close(&addr);
		zmq_msg_close(&head);
		if (ok)
			return 1;
	}
}

#endif
