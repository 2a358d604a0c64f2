// The Java twin of ../evictors.py: the same windows and evictors on Flink 2.3's own runtime (the jars of
// the apache-flink 2.3.0 wheel), printing the same lines. PyFlink 2.3 has no evictors, so the expected
// output of evictors.py is recorded from this program (record_pyflink_outputs.py compiles and runs it).

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.KeyedStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.functions.windowing.delta.DeltaFunction;
import org.apache.flink.streaming.api.windowing.assigners.GlobalWindows;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.evictors.CountEvictor;
import org.apache.flink.streaming.api.windowing.evictors.DeltaEvictor;
import org.apache.flink.streaming.api.windowing.evictors.TimeEvictor;
import org.apache.flink.streaming.api.windowing.triggers.CountTrigger;
import org.apache.flink.streaming.api.windowing.windows.Window;
import org.apache.flink.util.CloseableIterator;
import org.apache.flink.util.Collector;

public class Evictors {

    /** ('key', [values]) as Python prints the tuple. */
    static class Values<W extends Window> extends ProcessWindowFunction<Tuple3<String, Long, Long>, String, String, W> {
        @Override
        public void process(String key, Context context, Iterable<Tuple3<String, Long, Long>> elements, Collector<String> out) {
            List<Long> values = new ArrayList<>();
            for (Tuple3<String, Long, Long> e : elements) {
                values.add(e.f1);
            }
            out.collect("('" + key + "', " + values + ")");
        }
    }

    static class ValueDistance implements DeltaFunction<Tuple3<String, Long, Long>> {
        @Override
        public double getDelta(Tuple3<String, Long, Long> oldPoint, Tuple3<String, Long, Long> newPoint) {
            return Math.abs(oldPoint.f1 - newPoint.f1);
        }
    }

    static void show(String label, DataStream<String> stream) throws Exception {
        List<String> lines = new ArrayList<>();
        try (CloseableIterator<String> it = stream.executeAndCollect()) {
            it.forEachRemaining(lines::add);
        }
        Collections.sort(lines);
        System.out.println(label + ": [" + String.join(", ", lines) + "]");
    }

    public static void main(String[] args) throws Exception {
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.setParallelism(1);
        List<Tuple3<String, Long, Long>> events = new ArrayList<>();
        for (long v = 1; v <= 6; v++) {
            events.add(Tuple3.of("a", v, 500 * v));
        }
        for (long v = 1; v <= 3; v++) {
            events.add(Tuple3.of("b", 10 * v, 1000 * v));
        }
        KeyedStream<Tuple3<String, Long, Long>, String> keyed = env
                .fromData(events)
                .assignTimestampsAndWatermarks(WatermarkStrategy.<Tuple3<String, Long, Long>>forMonotonousTimestamps()
                        .withTimestampAssigner((e, t) -> e.f2))
                .keyBy(e -> e.f0, Types.STRING);

        show("count evictor", keyed.window(TumblingEventTimeWindows.of(Duration.ofSeconds(10)))
                .evictor(CountEvictor.of(2)).process(new Values<>()));
        show("time evictor + reduce", keyed.window(TumblingEventTimeWindows.of(Duration.ofSeconds(10)))
                .evictor(TimeEvictor.of(Duration.ofMillis(1000)))
                .reduce((a, b) -> Tuple3.of(a.f0, a.f1 + b.f1, Math.max(a.f2, b.f2)))
                .map(t -> "('" + t.f0 + "', " + t.f1 + ", " + t.f2 + ")").returns(Types.STRING));
        show("count evictor after firing", keyed.window(GlobalWindows.create()).trigger(CountTrigger.of(2))
                .evictor(CountEvictor.of(1, true)).process(new Values<>()));
        show("delta evictor", keyed.window(GlobalWindows.create()).trigger(CountTrigger.of(3))
                .evictor(DeltaEvictor.of(1.5, new ValueDistance())).process(new Values<>()));
        show("time evictor after firing", keyed.window(GlobalWindows.create()).trigger(CountTrigger.of(2))
                .evictor(TimeEvictor.of(Duration.ofMillis(600), true)).process(new Values<>()));
    }
}
