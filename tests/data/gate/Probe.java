import java.io.File;
import java.io.FileOutputStream;
import java.nio.file.Files;
import java.nio.file.Paths;

/** The changes the crash-point gate must hold, made by a JVM (as Spark and Hadoop make them). */
public class Probe {
    public static void main(String[] args) throws Exception {
        File root = new File(args[0]);
        try (FileOutputStream out = new FileOutputStream(new File(root, "a.parquet"))) {
            out.write('a');
        }
        File draft = new File(root, ".b.json.0123abcd.tmp");
        try (FileOutputStream out = new FileOutputStream(draft)) {
            out.write('b');
        }
        draft.renameTo(new File(root, "b.json"));
        Files.createLink(Paths.get(args[0], "c.json"), Paths.get(args[0], "b.json"));
        Files.delete(Paths.get(args[0], "a.parquet"));
        Files.write(Paths.get(args[0], "b.json"), new byte[] {'B'});
    }
}
