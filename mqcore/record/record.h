/*
 * The record and queue layout, for mqcore's C extensions: the C side of mqcore.record
 * (layout.py, unit.py, sysflag.py, prepared.py), where each value is defined and documented.
 * tests/test_record.py holds every value here to its Python definition.
 */
#ifndef MQCORE_RECORD_H
#define MQCORE_RECORD_H

/* --- the commit-log record (mqcore.record.layout) --- */
#define MESSAGE_MAGIC_CODE 0xDAA320A7u
#define BLANK_MAGIC_CODE 0xCBD43194u
#define HEADER_SIZE 88 /* the body starts here */
#define MIN_RECORD_SIZE (HEADER_SIZE + 3) /* an empty body, topic and property string */
#define MAX_TOPIC_LENGTH 127
#define MAX_PROPERTIES_SIZE 32767
#define POS_TOTAL_SIZE 0
#define POS_MAGIC_CODE 4
#define POS_BODY_CRC 8
#define POS_QUEUE_ID 12
#define POS_FLAG 16
#define POS_QUEUE_OFFSET 20
#define POS_PHYSICAL_OFFSET 28
#define POS_SYS_FLAG 36
#define POS_BORN_TIMESTAMP 40
#define POS_BORN_HOST 48
#define POS_STORE_TIMESTAMP 56
#define POS_STORE_HOST 64
#define POS_RECONSUME_TIMES 72
#define POS_PREPARED_TRANSACTION_OFFSET 76
#define POS_BODY_LENGTH 84

/* --- the sys flag (mqcore.record.sysflag) --- */
#define COMPRESSED_FLAG 0x1
#define V6_FLAGS 0x30

/* --- the consume-queue unit (mqcore.record.unit) --- */
#define UNIT_SIZE 20
#define UNIT_POS_OFFSET 0
#define UNIT_POS_SIZE 8
#define UNIT_POS_TAGS_CODE 12
#define MIN_DELIVER_CODE (1LL << 31)
#define MAX_DELIVER_DIGITS 18

/* --- a prepared record's fields (mqcore.record.prepared) --- */
#define P_SIZE 0
#define P_BODY 1
#define P_TRAILER 2
#define P_BODY_CRC 3
#define P_FLAG 4
#define P_SYS_FLAG 5
#define P_BORN_TIMESTAMP 6
#define P_RECONSUME_TIMES 7
#define P_PREPARED_TRANSACTION_OFFSET 8
#define P_TAGS_CODE 9
#define P_KEYS 10
#define P_FIELDS 11

#endif /* MQCORE_RECORD_H */
