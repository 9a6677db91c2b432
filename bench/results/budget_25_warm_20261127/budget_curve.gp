set terminal pngcairo size 1000,560 noenhanced font "sans,10"
set output "bench/results/budget_25_warm_20261127/budget_curve.png"
set logscale x
set xlabel "peak resident weights + activations (MiB, sampled)"
set ylabel "latency, budgeted / unbudgeted (planned copy, same run)"
set key outside right top
set grid
set yrange [0.9:*]
plot "bench/results/budget_25_warm_20261127/curve_bert_encoder_warm.dat" using 1:2 with linespoints lc rgb '#1b6ac9' dt 1 pt 7 title "bert_encoder, warm page cache", "bench/results/budget_25_warm_20261127/curve_bert_encoder_warm.dat" using 1:2:(sprintf("%g%%", $3)) with labels offset 0,0.8 font "sans,8" notitle, "bench/results/budget_25_warm_20261127/curve_resnet50_warm.dat" using 1:2 with linespoints lc rgb '#d0402b' dt 1 pt 7 title "resnet50, warm page cache", "bench/results/budget_25_warm_20261127/curve_resnet50_warm.dat" using 1:2:(sprintf("%g%%", $3)) with labels offset 0,0.8 font "sans,8" notitle
