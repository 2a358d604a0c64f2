// The Java twin of ../apply_to_keyed_state.py: the same rules and records on Flink 2.3's own runtime (the
// jars of the apache-flink 2.3.0 wheel), printing the same lines. PyFlink 2.3 has no apply_to_keyed_state,
// so the expected output of apply_to_keyed_state.py is recorded from this program.

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeHint;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.KeyedStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.co.KeyedBroadcastProcessFunction;
import org.apache.flink.util.CloseableIterator;
import org.apache.flink.util.Collector;

public class ApplyToKeyedState {

    static final ValueStateDescriptor<Long> SUMS = new ValueStateDescriptor<>("sum", Types.LONG);
    static final MapStateDescriptor<String, Long> RULES = new MapStateDescriptor<>("rules", Types.STRING, Types.LONG);

    static class ApplyRules extends KeyedBroadcastProcessFunction<
            String, Tuple3<String, Long, Long>, Tuple3<String, String, Long>, String> {
        private transient ValueState<Long> sum;

        @Override
        public void open(OpenContext openContext) {
            sum = getRuntimeContext().getState(SUMS);
        }

        @Override
        public void processElement(Tuple3<String, Long, Long> value, ReadOnlyContext ctx, Collector<String> out)
                throws Exception {
            String key = value.f0;
            if (ctx.getBroadcastState(RULES).contains("ban:" + key)) {
                return;
            }
            Long factor = ctx.getBroadcastState(RULES).get("scale:" + key);
            long previous = sum.value() == null ? 0 : sum.value();
            sum.update(previous + value.f1 * (factor == null ? 1 : factor));
            ctx.timerService().registerEventTimeTimer(1000);
        }

        @Override
        public void processBroadcastElement(Tuple3<String, String, Long> value, Context ctx, Collector<String> out)
                throws Exception {
            ctx.getBroadcastState(RULES).put(value.f0 + ":" + value.f1, value.f2);
            ctx.applyToKeyedState(SUMS, (key, state) -> {
                if (key.equals(value.f1) && value.f0.equals("ban")) {
                    state.clear();
                } else if (key.equals(value.f1)) {
                    state.update(state.value() * value.f2);
                }
            });
        }

        @Override
        public void onTimer(long timestamp, OnTimerContext ctx, Collector<String> out) throws Exception {
            if (sum.value() != null) {
                out.collect("('" + ctx.getCurrentKey() + "', " + sum.value() + ")");
            }
        }
    }

    public static void main(String[] args) throws Exception {
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.setParallelism(2);
        List<Tuple3<String, Long, Long>> records = List.of(
                Tuple3.of("a", 1L, 10L), Tuple3.of("b", 2L, 20L), Tuple3.of("c", 3L, 30L), Tuple3.of("a", 4L, 40L),
                Tuple3.of("b", 5L, 50L), Tuple3.of("d", 6L, 60L), Tuple3.of("c", 7L, 70L));
        KeyedStream<Tuple3<String, Long, Long>, String> keyed = env.fromData(records)
                .assignTimestampsAndWatermarks(WatermarkStrategy.<Tuple3<String, Long, Long>>forMonotonousTimestamps()
                        .withTimestampAssigner((e, t) -> e.f2))
                .keyBy(r -> r.f0, Types.STRING);
        TypeInformation<Tuple3<String, String, Long>> ruleType = TypeInformation.of(new TypeHint<>() {});
        DataStream<Tuple3<String, String, Long>> rules = env
                .fromData(List.of(Tuple3.of("scale", "a", 10L), Tuple3.of("ban", "b", 0L), Tuple3.of("scale", "d", 100L)))
                .map(rule -> {
                    Thread.sleep(500); // the rules usually come after the records (either order gives the same sums)
                    return rule;
                }).returns(ruleType);
        DataStream<String> sums = keyed.connect(rules.broadcast(RULES)).process(new ApplyRules());
        List<String> lines = new ArrayList<>();
        try (CloseableIterator<String> it = sums.executeAndCollect()) {
            it.forEachRemaining(lines::add);
        }
        Collections.sort(lines);
        lines.forEach(System.out::println);
    }
}
