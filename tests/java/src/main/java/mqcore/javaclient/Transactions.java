package mqcore.javaclient;

import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * TransactionMQProducer: four messages, each body naming its outcome. "commit" and
 * "rollback" are decided by executeLocalTransaction; "check-commit" and "check-rollback"
 * answer UNKNOW there and are decided when the broker's check calls checkLocalTransaction.
 * A push consumer of the topic, started before the sends, reports what it receives.
 */
final class Transactions {
    private Transactions() {
    }

    static LocalTransactionState outcome(String body, boolean checked) {
        switch (body) {
            case "commit":
                return LocalTransactionState.COMMIT_MESSAGE;
            case "rollback":
                return LocalTransactionState.ROLLBACK_MESSAGE;
            case "check-commit":
                return checked ? LocalTransactionState.COMMIT_MESSAGE
                        : LocalTransactionState.UNKNOW;
            case "check-rollback":
                return checked ? LocalTransactionState.ROLLBACK_MESSAGE
                        : LocalTransactionState.UNKNOW;
            default:
                throw new IllegalArgumentException("unknown body " + body);
        }
    }

    static void run(String ns, String topic, String group) throws Exception {
        Scenarios.Quiet quiet = new Scenarios.Quiet();
        DefaultMQPushConsumer c = Scenarios.pushConsumer(ns, group, group + "-0");
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                Scenarios.emit(Scenarios.received(0, m));
                quiet.hit();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();

        String[] bodies = {"commit", "rollback", "check-commit", "check-rollback"};
        CountDownLatch checks = new CountDownLatch(2);
        TransactionMQProducer p = new TransactionMQProducer("PID_java_tx");
        p.setNamesrvAddr(ns);
        p.setInstanceName("PID_java_tx-" + System.nanoTime());
        p.setSendMsgTimeout(15_000);
        p.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message m, Object arg) {
                String body = new String(m.getBody(), StandardCharsets.UTF_8);
                LocalTransactionState s = outcome(body, false);
                Json.emit("event", "executed", "body", body, "arg", arg, "state", s.name(),
                        "transactionId", m.getTransactionId());
                return s;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt m) {
                String body = new String(m.getBody(), StandardCharsets.UTF_8);
                LocalTransactionState s = outcome(body, true);
                Json.emit("event", "checked", "body", body, "state", s.name(),
                        "transactionId", m.getTransactionId(), "keys", m.getKeys(),
                        "topic", m.getTopic(), "msgId", m.getMsgId());
                checks.countDown();
                return s;
            }
        });
        p.start();
        try {
            for (String body : bodies) {
                Message m = Scenarios.msg(topic, "TagTx", "key-" + body, body);
                TransactionSendResult r = p.sendMessageInTransaction(m, "arg-" + body);
                Json.emit("event", "sent", "kind", "transaction", "body", body,
                        "status", r.getSendStatus().name(), "msgId", r.getMsgId(),
                        "transactionId", r.getTransactionId(),
                        "state", r.getLocalTransactionState().name(),
                        "queueId", r.getMessageQueue().getQueueId());
            }
            // The broker's check (every pass of its check interval) decides the two others.
            if (!checks.await(60, TimeUnit.SECONDS)) {
                Json.emit("event", "error", "what", "the broker never checked both");
            }
            quiet.await(2, 3000);
        } finally {
            p.shutdown();
            c.shutdown();
        }
    }
}
